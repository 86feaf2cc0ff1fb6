"""The decode-graph input path (static buffers, padding to captured sizes), run eagerly on CPU.

A CUDA graph cannot be captured here, so ``use_eager`` replays the same forward over the same
static buffers; what is checked is everything around the graph: packing, padding rows, block
tables wider or narrower than last step, and that the results equal the plain eager engine's.
"""

import random

import pytest

from engine import LLM, SamplingParams
from engine.runner.cuda_graphs import capture_sizes


def _prompts(n, seed=5):
    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(rng.randrange(2, 70))] for _ in range(n)]


def test_capture_sizes_cover_every_batch_up_to_the_max():
    assert capture_sizes(1) == [1]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert capture_sizes(64) == [1, 2, 4, 8, 16, 32, 48, 64]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_moe", "deepseek_v3"])
def test_graph_path_gives_the_eager_tokens(tiny_models, arch):
    prompts = _prompts(6)
    params = [SamplingParams(max_tokens=12 + 3 * i, temperature=0.0, ignore_eos=True) for i in range(6)]
    expected = [
        o.token_ids for o in LLM(tiny_models[arch], device="cpu", max_num_seqs=6).generate(prompts, params)
    ]

    llm = LLM(tiny_models[arch], device="cpu", max_num_seqs=6)
    runner = llm.engine.runner
    runner.capture_decode_graphs(5, eager=True)  # 6 running requests exceed it: eager fallback too
    calls = []
    original = runner.graphs.run
    runner.graphs.run = lambda out, *a: calls.append(len(out.scheduled)) or original(out, *a)
    actual = [o.token_ids for o in llm.generate(prompts, params)]
    assert actual == expected
    assert calls and min(calls) < max(calls)  # several padded sizes were replayed
    assert all(n <= 5 for n in calls)


def test_sampled_requests_still_use_the_full_sampler(tiny_llama):
    prompts = _prompts(3, seed=9)
    params = SamplingParams(max_tokens=10, temperature=0.8, top_k=20, seed=7, ignore_eos=True)
    expected = [o.token_ids for o in LLM(tiny_llama, device="cpu").generate(prompts, params)]
    llm = LLM(tiny_llama, device="cpu")
    llm.engine.runner.capture_decode_graphs(4, eager=True)
    assert [o.token_ids for o in llm.generate(prompts, params)] == expected


def test_graphs_need_cuda_unless_eager(tiny_llama):
    llm = LLM(tiny_llama, device="cpu")
    with pytest.raises(ValueError, match="CUDA"):
        llm.engine.runner.capture_decode_graphs(4)
