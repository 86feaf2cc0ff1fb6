"""Expert parallel with data-parallel attention on CPU (gloo, real rank processes) against one rank.

Greedy tokens must match exactly for the tiny DeepSeek-V3-style (MLA, sigmoid group-limited routing,
a shared expert, a dense first layer) and Qwen3-MoE checkpoints at EP 2 and 4, through chunked
prefill, prefix-cache hits, preemption (a small KV pool per rank), steps where some ranks have no
tokens, async scheduling, and the load balancer moving experts between steps."""

from __future__ import annotations

import shutil

import pytest
from safetensors.torch import load_file, save_file

from engine import LLM
from engine.kv.data_parallel import DataParallelKV
from engine.sampling.params import SamplingParams

SHARED = "import json\nclass Decoder(object):\n    def decode(self, s):\n        return"
PROMPTS = [
    "def main(argv):",
    [5, 6, 7, 8, 9, 10] * 5,
    SHARED + " json.loads(s)",
    "The quick brown fox",
    [3, 4, 5],
    SHARED + " None",
]
# Asked after PROMPTS: their shared prefix is cached by then, on the rank that ran it.
AGAIN = [SHARED + " s.strip()", SHARED + " 42"]
GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
MAX_MODEL_LEN = 64


class RankLog:
    """The ranks DataParallelKV placed requests on (this process runs the scheduler)."""

    def __init__(self, monkeypatch) -> None:
        self.ranks: set[int] = set()
        original = DataParallelKV.find_cached_prefix

        def logged(kv, request):
            hit = original(kv, request)
            self.ranks.add(kv.rank_of(request.request_id))
            return hit

        monkeypatch.setattr(DataParallelKV, "find_cached_prefix", logged)


def _generate(model_dir, ep: int, prompts=None, **overrides):
    settings = dict(device="cpu", max_num_batched_tokens=32, max_model_len=MAX_MODEL_LEN) | overrides
    with LLM(model_dir, expert_parallel_size=ep, data_parallel_size=ep, **settings) as llm:
        if prompts is not None:
            return [o.token_ids for o in llm.generate(prompts, GREEDY)], llm
        first = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]
        again = [o.token_ids for o in llm.generate(AGAIN, GREEDY)]
        stats = llm.engine.stats()
        report = llm.engine.runner.expert_balancer_report() if ep > 1 else {}
    return first + again, stats, report


@pytest.fixture(scope="module")
def one_rank(tiny_models):
    """Single-rank tokens per architecture, computed once."""
    cache: dict[str, list] = {}

    def tokens(arch: str) -> list:
        if arch not in cache:
            cache[arch] = _generate(tiny_models[arch], 1)[0]
        return cache[arch]

    return tokens


@pytest.mark.parametrize(
    ("arch", "ep", "overrides"),
    [
        ("deepseek_v3", 2, {"async_scheduling": True}),
        ("deepseek_v3", 4, {}),
        ("qwen3_moe", 2, {}),
        ("qwen3_moe", 4, {"async_scheduling": True}),
    ],
)
def test_ep_matches_one_rank_token_for_token(tiny_models, one_rank, monkeypatch, arch, ep, overrides):
    log = RankLog(monkeypatch)
    # 4 blocks of 16 tokens per rank (one max_model_len sequence): fewer than the requests a rank is
    # given need together.
    tokens, stats, _ = _generate(tiny_models[arch], ep, num_gpu_blocks=4, **overrides)
    assert tokens == one_rank(arch)
    assert log.ranks == set(range(ep))  # every rank ran requests
    assert stats.num_preemptions > 0
    assert stats.prefix_cache_hits > 0
    assert stats.num_blocks_total == 4 * ep


def test_ranks_without_tokens_still_serve_their_experts(tiny_models, one_rank, monkeypatch):
    """One request on four ranks: ranks 1-3 run no attention at all, yet its tokens reach their
    experts (rank 0 holds only experts 0 and 1 of 8) every step."""
    log = RankLog(monkeypatch)
    alone, _ = _generate(tiny_models["qwen3_moe"], 4, prompts=[PROMPTS[0]])
    expected, _ = _generate(tiny_models["qwen3_moe"], 1, prompts=[PROMPTS[0]])
    assert alone == expected
    assert log.ranks == {0}


def test_load_balancer_moves_experts_without_changing_outputs(tiny_models, one_rank):
    tokens, _, report = _generate(
        tiny_models["deepseek_v3"], 2, eplb_interval_steps=3, eplb_window_steps=30, eplb_extra_slots=1
    )
    assert tokens == one_rank("deepseek_v3")
    assert report, "the balancer ran"
    assert any(layer["moves"] for layer in report.values())
    for layer in report.values():
        assert layer["imbalance_after"] <= layer["imbalance_before"]


@pytest.fixture(scope="module")
def skewed_deepseek_v3(tiny_models, tmp_path_factory):
    """The tiny DeepSeek-V3 checkpoint with experts 0 and 1 (both in rank 0's contiguous share at any
    EP size) favoured by their routing correction bias: a skewed routing trace, with the same
    checkpoint for the one-rank reference."""
    source = tiny_models["deepseek_v3"]
    target = tmp_path_factory.mktemp("skewed") / "deepseek_v3"
    shutil.copytree(source, target)
    [path] = target.glob("*.safetensors")
    tensors = load_file(path)
    for name, tensor in tensors.items():
        if name.endswith("mlp.gate.e_score_correction_bias"):
            tensor[:2] += 10.0
    save_file(tensors, path, metadata={"format": "pt"})
    return target


def test_load_balancer_cuts_a_skewed_imbalance_by_half_with_outputs_unchanged(skewed_deepseek_v3):
    """One extra slot per rank: the hot experts get copies on the other ranks and their pairs split
    over the copies; the contiguous split would send every pair to rank 0."""
    expected = _generate(skewed_deepseek_v3, 1)[0]
    tokens, _, report = _generate(
        skewed_deepseek_v3, 4, eplb_interval_steps=3, eplb_window_steps=30, eplb_extra_slots=1
    )
    assert tokens == expected
    assert report  # its MoE layer (the first layer is dense; layer 2 is the MTP layer)
    for layer in report.values():
        assert layer["moves"] >= 1
        assert layer["imbalance_contiguous"] >= 2 * layer["imbalance_after"], layer


def test_a_dense_model_is_refused_before_any_rank_starts(tiny_models):
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        LLM(tiny_models["llama"], device="cpu", expert_parallel_size=2, data_parallel_size=2)


def test_unequal_sizes_are_refused(tiny_models):
    with pytest.raises(ValueError, match="must equal data_parallel_size"):
        LLM(tiny_models["qwen3_moe"], device="cpu", expert_parallel_size=2, data_parallel_size=1)
