"""Multi-head latent attention (engine/layers/mla.py, latent_attention.py) on random weights: the
absorbed decode equals the expanded formulation, chunked and prefix-cached steps equal one fresh
prefill, a mixed step sends its decode rows through one absorbed call and equals its requests run
alone (a fresh prompt in it bringing its own rows, on CUDA one flash-attention call for the group),
and latents land in and come back from the right pages."""

from dataclasses import replace

import pytest
import torch

from engine.layers import latent_attention
from engine.layers.attention import AttentionMetadata
from engine.layers.latent_attention import LatentAttention
from engine.layers.mla import MLAAttention, mla_rotary
from engine.models.deepseek_v2 import parse_deepseek_config
from engine.runner.inputs import build_inputs
from engine.scheduler.output import ScheduledRequest, SchedulerOutput
from engine.scheduler.request import Request
from kernels.latent_cache_write import write_latent
from kernels.mla_decode import gather_latents

BLOCK_SIZE, NUM_BLOCKS, HIDDEN = 4, 16, 32
RANK, ROPE = 16, 4


def _layer(
    q_lora_rank: int | None,
    interleave: bool = True,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    nope_v: tuple[int, int] = (8, 6),
) -> MLAAttention:
    raw = dict(
        vocab_size=64,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=RANK,
        qk_nope_head_dim=nope_v[0],
        qk_rope_head_dim=ROPE,
        v_head_dim=nope_v[1],
        max_position_embeddings=64,
        rope_interleave=interleave,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
    )
    cfg = parse_deepseek_config(raw, "DeepseekV2ForCausalLM")
    layer = MLAAttention(cfg, 0, mla_rotary(cfg, 64, torch.device(device)), dtype, torch.device(device))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            scale = 0.1 if "norm" in name else 0.3
            param.copy_((1.0 if "norm" in name else 0.0) + scale * torch.randn(param.shape, generator=gen))
    layer.attn.bind_kv_cache(torch.zeros(NUM_BLOCKS, BLOCK_SIZE, RANK + ROPE, device=device, dtype=dtype))
    return layer


def _meta(
    tables: list[list[int]], starts: list[int], lens: list[int], device: str = "cpu"
) -> AttentionMetadata:
    """Request b feeds ``lens[b]`` tokens from position ``starts[b]`` through its block table, as the
    model runner prepares the step."""
    scheduled = [
        ScheduledRequest(Request(f"r{b}", [0], max_tokens=1), start, n, table, [0] * n, samples=True)
        for b, (table, start, n) in enumerate(zip(tables, starts, lens, strict=True))
    ]
    return build_inputs(
        SchedulerOutput(scheduled), BLOCK_SIZE, torch.device(device), split_decode_rows=True
    ).meta


def _positions(starts, lens):
    return torch.cat([torch.arange(s, s + n) for s, n in zip(starts, lens, strict=True)])


TABLES = [[5, 2, 9, 0], [7, 3, 12, 1]]  # pages out of order, so a wrong gather shows


@pytest.mark.parametrize("q_lora_rank", [None, 12])
@pytest.mark.parametrize("interleave", [True, False])
def test_absorbed_decode_equals_the_expanded_formulation(q_lora_rank, interleave):
    layer = _layer(q_lora_rank, interleave)
    x = torch.randn(30, HIDDEN, generator=torch.Generator().manual_seed(1))
    prompt_lens = [11, 6]
    with torch.no_grad():
        layer(_positions([0, 0], prompt_lens), x[:17], _meta(TABLES, [0, 0], prompt_lens))
        for step in range(3):  # three decode steps of both requests
            starts = [n + step for n in prompt_lens]
            rows = x[17 + 2 * step : 19 + 2 * step]
            meta = _meta(TABLES, starts, [1, 1])
            absorbed = layer(_positions(starts, [1, 1]), rows, meta)
            expanded = layer(_positions(starts, [1, 1]), rows, replace(meta, decode_only=False))
            torch.testing.assert_close(absorbed, expanded, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("q_lora_rank", [None, 12])
def test_chunked_and_prefix_cached_steps_equal_one_fresh_prefill(q_lora_rank):
    x = torch.randn(13, HIDDEN, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole = _layer(q_lora_rank)(torch.arange(13), x, _meta(TABLES[:1], [0], [13]))
        layer = _layer(q_lora_rank)
        chunks = [(0, 5), (5, 4), (9, 4)]  # later chunks see their prefix only through the pages
        parts = [layer(torch.arange(s, s + n), x[s : s + n], _meta(TABLES[:1], [s], [n])) for s, n in chunks]
    torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("q_lora_rank", [None, 12])
def test_a_mixed_step_batches_its_decode_rows_and_equals_each_request_alone(q_lora_rank, monkeypatch):
    # Two decode rows around a prefill chunk whose first 4 tokens were cached by an earlier step.
    tables = {"a": TABLES[0], "b": TABLES[1], "c": [11, 4, 14]}
    prompt_lens = {"a": 6, "b": 5, "c": 4}
    step = {"a": (6, 1), "c": (4, 4), "b": (5, 1)}  # request -> (start, tokens) of the mixed step
    x = torch.randn(21, HIDDEN, generator=torch.Generator().manual_seed(3))
    rows = {"a": x[:7], "b": x[7:13], "c": x[13:21]}

    def prefill(layer, names):
        lens = [prompt_lens[r] for r in names]
        inputs = torch.cat([rows[r][: prompt_lens[r]] for r in names])
        layer(
            _positions([0] * len(names), lens),
            inputs,
            _meta([tables[r] for r in names], [0] * len(names), lens),
        )

    def mixed_step(layer, names):
        starts, lens = [step[r][0] for r in names], [step[r][1] for r in names]
        inputs = torch.cat([rows[r][s : s + n] for r, (s, n) in ((r, step[r]) for r in names)])
        return layer(_positions(starts, lens), inputs, _meta([tables[r] for r in names], starts, lens))

    with torch.no_grad():
        alone = []
        for name in step:
            layer = _layer(q_lora_rank)
            prefill(layer, [name])
            alone.append(mixed_step(layer, [name]))
        layer = _layer(q_lora_rank)
        prefill(layer, ["a", "b", "c"])
        decode_batches, attended = _spy(monkeypatch)
        mixed = mixed_step(layer, list(step))
    torch.testing.assert_close(mixed, torch.cat(alone), rtol=1e-5, atol=1e-5)
    assert decode_batches == [2]  # both decode rows in one absorbed call
    assert attended == [4]  # only the prefill chunk took the expanded path


@pytest.mark.parametrize("budget", [1 << 15, 8])
def test_prefill_chunks_after_cached_prefixes_expand_together_and_equal_each_alone(budget, monkeypatch):
    """Two prompts' second chunks in one step: their pages are gathered and expanded in one product
    (or one per group of at most ``budget`` context tokens), each attends only to its own context."""
    tables = {"a": TABLES[0], "c": [11, 4, 14]}
    first, second = {"a": 6, "c": 4}, {"a": 3, "c": 5}
    x = torch.randn(18, HIDDEN, generator=torch.Generator().manual_seed(5))
    rows = {"a": x[:9], "c": x[9:18]}

    def run(layer, names, starts, lens):
        inputs = torch.cat([rows[r][s : s + n] for r, s, n in zip(names, starts, lens, strict=True)])
        return layer(_positions(starts, lens), inputs, _meta([tables[r] for r in names], starts, lens))

    def both_chunks(layer, names):
        run(layer, names, [0] * len(names), [first[r] for r in names])
        return run(layer, names, [first[r] for r in names], [second[r] for r in names])

    with torch.no_grad():
        alone = [both_chunks(_layer(None), [name]) for name in tables]
        monkeypatch.setattr(latent_attention, "EXPANSION_TOKENS", budget)
        expansions = []
        expand = LatentAttention._expand

        def counting_expand(self, latent, *args):
            expansions.append(latent.shape[0])
            return expand(self, latent, *args)

        monkeypatch.setattr(LatentAttention, "_expand", counting_expand)
        _, attended = _spy(monkeypatch)
        together = both_chunks(_layer(None), list(tables))
    torch.testing.assert_close(together, torch.cat(alone), rtol=1e-5, atol=1e-5)
    assert attended[-2:] == [3, 5]
    # the second step's expansions: both contexts of 9 tokens, gathered from their pages and packed
    if budget == 8:  # each context alone
        assert expansions[-2:] == [9, 9]
    else:
        assert expansions[-1:] == [18]


FRESH_BESIDE_CACHED = {  # request -> (block table, prompt tokens before the step, (start, tokens) in it)
    "a": (TABLES[0], 6, (6, 1)),  # a decode row
    "c": ([11, 4, 14], 4, (4, 4)),  # a chunk after 4 cached tokens
    "d": ([8, 13], 0, (0, 5)),  # a fresh prompt: its context is its own rows of the step
    "b": (TABLES[1], 5, (5, 1)),  # another decode row
}


def _fresh_beside_cached(monkeypatch, device: str = "cpu", dtype: torch.dtype = torch.float32, nope_v=(8, 6)):
    """The step above run together and each request alone (after the same earlier prefill)."""
    x = torch.randn(30, HIDDEN, generator=torch.Generator().manual_seed(7)).to(device, dtype)
    rows = {"a": x[:7], "c": x[7:15], "d": x[15:20], "b": x[20:26]}

    def prefill(layer, names):
        names = [r for r in names if FRESH_BESIDE_CACHED[r][1]]
        if names:
            lens = [FRESH_BESIDE_CACHED[r][1] for r in names]
            inputs = torch.cat([rows[r][:n] for r, n in zip(names, lens, strict=True)])
            tables = [FRESH_BESIDE_CACHED[r][0] for r in names]
            layer(
                _positions([0] * len(names), lens).to(device),
                inputs,
                _meta(tables, [0] * len(names), lens, device),
            )

    def step(layer, names):
        starts = [FRESH_BESIDE_CACHED[r][2][0] for r in names]
        lens = [FRESH_BESIDE_CACHED[r][2][1] for r in names]
        inputs = torch.cat([rows[r][s : s + n] for r, s, n in zip(names, starts, lens, strict=True)])
        tables = [FRESH_BESIDE_CACHED[r][0] for r in names]
        return layer(_positions(starts, lens).to(device), inputs, _meta(tables, starts, lens, device))

    with torch.no_grad():
        alone = []
        for name in FRESH_BESIDE_CACHED:
            layer = _layer(None, device=device, dtype=dtype, nope_v=nope_v)
            prefill(layer, [name])
            alone.append(step(layer, [name]))
        layer = _layer(None, device=device, dtype=dtype, nope_v=nope_v)
        prefill(layer, list(FRESH_BESIDE_CACHED))
        contexts = []
        contexts_of = LatentAttention._contexts

        def recording_contexts(self, group, *args):
            contexts.append([(r[2], r[3]) for r in group])
            return contexts_of(self, group, *args)

        monkeypatch.setattr(LatentAttention, "_contexts", recording_contexts)
        together = step(layer, list(FRESH_BESIDE_CACHED))
    return together, torch.cat(alone), contexts


def test_a_fresh_prompt_beside_a_cached_chunk_brings_its_own_rows_and_equals_each_alone(monkeypatch):
    _, attended = _spy(monkeypatch)
    together, alone, contexts = _fresh_beside_cached(monkeypatch)
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    assert contexts[-1] == [(4, 8), (5, 5)]  # one group: the cached chunk's context, the fresh rows
    assert attended[-2:] == [4, 5]  # off CUDA, request by request


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash attention's varlen call runs on CUDA")
def test_on_cuda_a_group_attends_in_one_varlen_call_equal_to_each_request_alone(monkeypatch):
    from kernels import varlen_attention

    # The reference is the same layer (same weights and inputs) in fp32 on the CPU, each request
    # alone. Not each request alone on CUDA: at these tiny head sizes SDPA's own CUDA kernels are off
    # by up to 3 on the H200 (scripts/gpu/check_varlen.py, "engine-shaped"; right at DeepSeek's sizes).
    with pytest.MonkeyPatch.context() as cpu:
        _, alone, _ = _fresh_beside_cached(cpu, "cpu", torch.float32, nope_v=(12, 8))
    calls = []
    varlen = varlen_attention.causal_varlen

    def counting(q, k, v, query_lens, context_lens, scale):
        calls.append((list(query_lens), list(context_lens)))
        return varlen(q, k, v, query_lens, context_lens, scale)

    monkeypatch.setattr(latent_attention, "causal_varlen", counting)
    monkeypatch.setattr(latent_attention, "use_triton", lambda *tensors: True)
    # flash attention's head sizes are multiples of 8: keys of 12 + 4, values of 8 (padded to 16)
    together, _, _ = _fresh_beside_cached(monkeypatch, "cuda", torch.bfloat16, nope_v=(12, 8))
    assert calls[-1] == ([4, 5], [8, 5])
    torch.testing.assert_close(together.float().cpu(), alone, rtol=5e-2, atol=5e-2)


def _spy(monkeypatch) -> tuple[list[int], list[int]]:
    """Records the batch of every absorbed decode call and the query rows of every expanded one."""
    decode_batches: list[int] = []
    attended: list[int] = []
    mla_decode, attend = latent_attention.mla_decode, LatentAttention._causal

    def counting_decode(q_latent, *args, **kwargs):
        decode_batches.append(q_latent.shape[0])
        return mla_decode(q_latent, *args, **kwargs)

    def counting_attend(self, q, *args):
        attended.append(q.shape[0])
        return attend(self, q, *args)

    monkeypatch.setattr(latent_attention, "mla_decode", counting_decode)
    monkeypatch.setattr(LatentAttention, "_causal", counting_attend)
    # The split into absorbed and expanded calls is the GPU's (Triton) dispatch, which cannot run
    # here: a CPU takes the absorbed formulation for every row (kernels/cpu_invariant.py). Pretend
    # to be that device; the kernels themselves still run their torch references.
    monkeypatch.setattr(latent_attention, "use_triton", lambda *tensors: True)
    return decode_batches, attended


def test_latents_are_written_to_and_gathered_from_their_pages():
    cache = torch.zeros(NUM_BLOCKS, BLOCK_SIZE, RANK + ROPE)
    table = torch.tensor([6, 1, 11], dtype=torch.int32)
    c, k_rope = torch.randn(10, RANK), torch.randn(10, ROPE)
    slots = torch.tensor([table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(10)])
    write_latent(cache, slots, c, k_rope)
    torch.testing.assert_close(gather_latents(cache, table, 10), torch.cat((c, k_rope), dim=1))
    assert cache[1, 2].equal(torch.cat((c[6], k_rope[6])))  # position 6: second page, row 2
    assert cache[0].abs().sum() == 0  # pages outside the table untouched


def test_a_cache_of_the_wrong_width_is_refused():
    layer = _layer(None)
    with pytest.raises(ValueError, match="does not fit a latent"):
        layer.attn.bind_kv_cache(torch.zeros(NUM_BLOCKS, BLOCK_SIZE, RANK))
