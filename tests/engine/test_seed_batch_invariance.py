"""Issue 20, acceptance 2: on CPU (fp32), in batch-invariant mode, a request's tokens and logprobs,
greedy or seeded, are the same bits whatever else shares its steps: run alone, in batches of 8 or all at once, with prefill
chunked at 64 tokens or not, with prefix-cache hits or without; for every architecture."""

import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.models.registry import supported_architectures
from engine.testing.tiny_model import ARCHES, FLAVORS, VOCAB_SIZE
from kernels.invariance import batch_invariant, set_batch_invariant

PROMPTS = 6
# Gemma's local layers sit beside global ones: under the default bounded replay (engine/kv/layout.py)
# a hit shorter than the window plus swa_replay_margin (140) is recomputed whole for the local layers,
# so these prompts would report no cached tokens; whole contexts keep the hits this test needs.
KV_MODES = {"gemma2": {"sliding_window_kv": "full-context"}, "gemma3": {"sliding_window_kv": "full-context"}}
SHARED_PREFIX = 50  # over three 16-token blocks: later prompts hit the cache on the first pass too
MAX_TOKENS = 4


@pytest.fixture
def one_thread():
    """One intra-op thread: on a busy 2-core host a two-thread pool's barriers made these tiny steps
    ~15x slower. (The products' row invariance at two threads: tests/kernels/test_cpu_invariant.py.)"""
    before, mode = torch.get_num_threads(), batch_invariant()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    set_batch_invariant(mode)  # the engines below turn the process-wide mode on


def _requests() -> tuple[list[list[int]], list[SamplingParams]]:
    """Each prompt greedy and seeded (temperature 1, a seed per request), logprobs with the top 2."""
    rng = random.Random(20)
    shared = [rng.randrange(3, VOCAB_SIZE) for _ in range(SHARED_PREFIX)]
    prompts, params = [], []
    for i, length in enumerate((3, 9, 20, 33, 70, 130)):  # 130: three chunks at 64 tokens a step
        own = [rng.randrange(3, VOCAB_SIZE) for _ in range(length)]
        prompt = shared + own if i % 2 else own
        prompts += [prompt, prompt]
        params += [
            SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, logprobs=2, ignore_eos=True),
            SamplingParams(
                max_tokens=MAX_TOKENS - i % 2,  # requests leave the batch at different steps
                temperature=1.0,
                top_k=0 if i % 3 else 20,
                seed=1000 + i,
                logprobs=2,
                ignore_eos=True,
            ),
        ]
    return prompts, params


def _bits(outputs) -> list[tuple]:
    """Tokens and every logprob, as exact bits (float.hex)."""
    return [
        (
            tuple(out.token_ids),
            tuple(
                (lp.token_id, lp.logprob.hex(), tuple((t, v.hex()) for t, v in lp.top)) for lp in out.logprobs
            ),
        )
        for out in outputs
    ]


def _run(llm: LLM, prompts, params, batch: int) -> tuple[list[tuple], list[int]]:
    """Every request's bits, and how many prompt tokens each found in the prefix cache."""
    outputs = []
    for start in range(0, len(prompts), batch):
        outputs += llm.generate(prompts[start : start + batch], params[start : start + batch])
    return _bits(outputs), [out.num_cached_tokens for out in outputs]


def test_every_registered_architecture_has_a_tiny_checkpoint():
    tiny = {FLAVORS[arch].architecture for arch in ARCHES}
    assert set(supported_architectures()) <= tiny


@pytest.mark.parametrize("arch", ARCHES)
def test_same_bits_alone_batched_chunked_and_cached(tiny_models, arch, one_thread):
    prompts, params = _requests()
    n = len(prompts)
    kv = KV_MODES.get(arch, {})
    plain = LLM(tiny_models[arch], device="cpu", batch_invariant=True, enable_prefix_caching=False, **kv)
    reference, _ = _run(plain, prompts, params, 1)
    runs = {"all at once": _run(plain, prompts, params, n)}
    chunked = LLM(
        tiny_models[arch],
        device="cpu",
        batch_invariant=True,
        enable_prefix_caching=False,
        max_num_batched_tokens=64,
        **kv,
    )
    runs["chunked, batches of 8"] = _run(chunked, prompts, params, 8)
    cached = LLM(tiny_models[arch], device="cpu", batch_invariant=True, max_num_batched_tokens=64, **kv)
    runs["chunked, cached, batches of 8"] = _run(cached, prompts, params, 8)
    runs["chunked, second pass, all at once"] = _run(cached, prompts, params, n)
    cached_whole = LLM(tiny_models[arch], device="cpu", batch_invariant=True, **kv)
    runs["cached, all at once"] = _run(cached_whole, prompts, params, n)
    runs["second pass, alone"] = _run(cached_whole, prompts, params, 1)

    # The property could fail: prompts give different tokens, seeds matter, logprobs are there,
    # and the cache was hit (in the first pass by the shared prefix, in a second pass by every prompt).
    assert len({tokens for tokens, _ in reference[::2]}) > 1
    assert any(reference[i][0][: len(reference[i + 1][0])] != reference[i + 1][0] for i in range(0, n, 2))
    assert all(len(lps) == len(tokens) and all(len(lp[2]) == 2 for lp in lps) for tokens, lps in reference)
    assert sum(runs["chunked, cached, batches of 8"][1]) > 0
    long_enough = [len(prompt) > 16 for prompt in prompts]  # a full block before the last token
    assert all(c > 0 for c, hit in zip(runs["second pass, alone"][1], long_enough, strict=True) if hit)
    for name, (got, _) in runs.items():
        differing = [i for i in range(n) if got[i] != reference[i]]
        assert not differing, f"{arch}, {name}: requests {differing} differ from each run alone"
