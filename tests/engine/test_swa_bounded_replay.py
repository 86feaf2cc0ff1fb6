"""Issue 20, acceptance 4 (CPU): sliding-window layers keep only their windows, and a prefix-cache
hit or a resume after preemption recomputes for them only the window plus ``swa_replay_margin``
tokens while full-attention layers reuse their cached blocks (engine/kv/layout.py). On a tiny
checkpoint of interleaved local and global layers, greedy outputs with bounded replay equal a full
recompute's token for token; with a margin covering the windowed layers' reach (the default 140 does
here) the replay is exact, so in batch-invariant mode the logprobs are the same bits too."""

from __future__ import annotations

import json
import random

import pytest

from engine import LLM, SamplingParams
from engine.testing.tiny_model import VOCAB_SIZE, make_tiny_model

WINDOW = 16
BLOCK = 16
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
SHARED = 420  # past window + margin + a 256-token alignment: a hit on it skips whole blocks
TAILS = (5, 37, 90)
NEW_TOKENS = 6


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    """Qwen3 with four layers, local (a 16-token window) and global in turn."""
    path = make_tiny_model(tmp_path_factory.mktemp("interleaved"), arch="qwen3", seed=7, num_layers=4)
    raw = json.loads((path / "config.json").read_text())
    raw.update(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=0, layer_types=LAYER_TYPES)
    (path / "config.json").write_text(json.dumps(raw))
    return path


def test_gemma3_interleaving_replays_exactly(tiny_gemma3):
    """Gemma-3's pattern (local, local, global twice; windows of 16): bounded replay after hits
    gives a full recompute's tokens and logprobs, bit for bit in batch-invariant mode."""
    reference = _reference(tiny_gemma3, _prompts(), batch_invariant=True)
    llm = LLM(tiny_gemma3, device="cpu", block_size=BLOCK, batch_invariant=True)
    layout = llm.engine.kv.layout
    assert layout.window_layers == (0, 1, 3, 4) and layout.exact_replay_margin() <= layout.replay_margin
    llm.generate(_prompts(), GREEDY)
    second = llm.generate(_prompts(), GREEDY)
    assert _bits(second) == reference
    assert all(o.num_cached_tokens > 0 for o in second)


def _prompts(shared: int = SHARED, tails: tuple[int, ...] = TAILS) -> list[list[int]]:
    rng = random.Random(4)
    prefix = [rng.randrange(3, VOCAB_SIZE) for _ in range(shared)]
    return [prefix + [rng.randrange(3, VOCAB_SIZE) for _ in range(n)] for n in tails]


GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, logprobs=2)


def _bits(outputs) -> list[tuple]:
    return [
        (tuple(o.token_ids), tuple((lp.token_id, lp.logprob.hex()) for lp in o.logprobs)) for o in outputs
    ]


def _reference(model, prompts, params=GREEDY, **kwargs) -> list[tuple]:
    """A full recompute of every request alone: whole contexts on every layer, no cache."""
    llm = LLM(model, device="cpu", sliding_window_kv="full-context", enable_prefix_caching=False, **kwargs)
    return [_bits(llm.generate([p], params))[0] for p in prompts]


def _record_hits(llm: LLM) -> list[tuple[int, int]]:
    """Each admission's prefix hit: (tokens its main-group blocks hold, tokens not recomputed)."""
    hits = []
    find = llm.engine.kv.find_cached_prefix

    def recording(request, record=True):
        hit = find(request, record)
        hits.append((hit.num_block_tokens, hit.num_tokens))
        return hit

    llm.engine.kv.find_cached_prefix = recording
    return hits


def _record_window_blocks(llm: LLM) -> list[int]:
    """Blocks the window group holds after each one-token step's allocation, per request."""
    kv = llm.engine.kv
    held: list[int] = []
    allocate = kv.window.allocate

    def recording(request_id, start, total_tokens):
        allocate(request_id, start, total_tokens)
        if total_tokens - start == 1:
            held.append(kv.window.num_held(request_id))

    kv.window.allocate = recording
    return held


@pytest.mark.parametrize("batch_invariant", [False, True], ids=["normal", "batch-invariant"])
def test_bounded_replay_after_hits_equals_a_full_recompute(interleaved, batch_invariant):
    reference = _reference(interleaved, _prompts(), batch_invariant=batch_invariant)
    llm = LLM(interleaved, device="cpu", block_size=BLOCK, batch_invariant=batch_invariant)
    layout = llm.engine.kv.layout
    assert layout.hybrid and layout.window_layers == (0, 2) and layout.replay_margin == 140
    assert layout.exact_replay_margin() == WINDOW - 1 <= layout.replay_margin
    held = _record_window_blocks(llm)
    prompts = _prompts()
    first = llm.generate(prompts, GREEDY)  # later prompts hit the first one's shared blocks
    second = llm.generate(prompts, GREEDY)  # every prompt hits its own blocks
    tokens = [tuple(t) for t, _ in reference]
    assert [tuple(o.token_ids) for o in first] == tokens
    assert [tuple(o.token_ids) for o in second] == tokens
    if batch_invariant:
        assert _bits(first) == reference and _bits(second) == reference
    for out in second:
        hit = (len(out.prompt_token_ids) - 1) // BLOCK * BLOCK  # the main group's cached blocks
        # Only the window + margin before the hit was recomputed (from a block or tile boundary).
        assert out.num_cached_tokens == layout.replay_start(hit)
        assert 0 < out.num_cached_tokens <= hit - WINDOW - layout.replay_margin
    # While decoding, a windowed layer held its window and one block more, never the context.
    assert held and max(held) <= -(-WINDOW // BLOCK) + layout.base_alignment // BLOCK
    stats = llm.stats()
    assert stats.num_blocks_used == 0 and llm.engine.kv.window.pool.num_used_blocks == 0
    assert stats.window_blocks_total == llm.engine.runner.num_window_blocks > 0


def test_resumes_after_preemption_replay_the_window_only(interleaved):
    prompts = _prompts(shared=0, tails=(500, 500, 500))  # 32 blocks each, nothing shared
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True, logprobs=2)
    reference = _reference(interleaved, prompts, params)
    # 80 main-pool blocks hold two of these contexts, not three: the third, admitted chunk by chunk
    # while the first two decode, is preempted, and comes back to the blocks its first chunks left
    # in the prefix cache.
    llm = LLM(interleaved, device="cpu", block_size=BLOCK, num_gpu_blocks=80, max_num_batched_tokens=128)
    hits = _record_hits(llm)
    outs = llm.generate(prompts, params)
    assert [tuple(o.token_ids) for o in outs] == [t for t, _ in reference]
    assert llm.stats().num_preemptions > 0
    # A resume found the request's own blocks and recomputed only a suffix for the windowed layers.
    assert any(0 < start < blocks for blocks, start in hits)


def test_full_replay_recomputes_the_prompt_for_windowed_layers_only(interleaved):
    reference = _reference(interleaved, _prompts())
    llm = LLM(interleaved, device="cpu", block_size=BLOCK, sliding_window_kv="full-replay")
    llm.generate(_prompts(), GREEDY)
    hits = _record_hits(llm)
    second = llm.generate(_prompts(), GREEDY)
    assert [tuple(o.token_ids) for o in second] == [t for t, _ in reference]
    # The full-attention layers reused their cached blocks; the windowed ones started over.
    assert all(blocks >= SHARED // BLOCK * BLOCK and start == 0 for blocks, start in hits)
    assert all(o.num_cached_tokens == 0 for o in second)


def test_full_context_keeps_every_layer_whole(interleaved):
    llm = LLM(interleaved, device="cpu", block_size=BLOCK, sliding_window_kv="full-context")
    assert not llm.engine.kv.layout.has_window_group and llm.engine.runner.num_window_blocks == 0
    llm.generate(_prompts(), GREEDY)
    second = llm.generate(_prompts(), GREEDY)
    assert all(o.num_cached_tokens == (len(o.prompt_token_ids) - 1) // BLOCK * BLOCK for o in second)
