"""Multi-head latent attention (engine/layers/mla.py, latent_attention.py) on random weights: the
absorbed decode equals the expanded formulation, chunked and prefix-cached steps equal one fresh
prefill, and latents land in and come back from the right pages."""

import pytest
import torch

from engine.layers.attention import AttentionMetadata
from engine.layers.mla import MLAAttention, mla_rotary
from engine.models.deepseek_v2 import parse_deepseek_config
from kernels.latent_cache_write import write_latent
from kernels.mla_decode import gather_latents

BLOCK_SIZE, NUM_BLOCKS, HIDDEN = 4, 16, 32
RANK, ROPE = 16, 4


def _layer(q_lora_rank: int | None, interleave: bool = True) -> MLAAttention:
    raw = dict(
        vocab_size=64,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=RANK,
        qk_nope_head_dim=8,
        qk_rope_head_dim=ROPE,
        v_head_dim=6,
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
    layer = MLAAttention(cfg, 0, mla_rotary(cfg, 64, torch.device("cpu")), torch.float32, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            scale = 0.1 if "norm" in name else 0.3
            param.copy_((1.0 if "norm" in name else 0.0) + scale * torch.randn(param.shape, generator=gen))
    layer.attn.bind_kv_cache(torch.zeros(NUM_BLOCKS, BLOCK_SIZE, RANK + ROPE))
    return layer


def _meta(tables: list[list[int]], starts: list[int], lens: list[int], decode: bool) -> AttentionMetadata:
    """Request b feeds ``lens[b]`` tokens from position ``starts[b]`` through its block table."""
    slots = [
        table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE
        for table, start, n in zip(tables, starts, lens, strict=True)
        for p in range(start, start + n)
    ]
    width = max(len(t) for t in tables)
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
        seq_lens=torch.tensor([s + n for s, n in zip(starts, lens, strict=True)], dtype=torch.int32),
        query_start_loc=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32),
        decode_only=decode,
        fresh_prefill_lens=list(lens) if not any(starts) else None,
    )


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
        layer(_positions([0, 0], prompt_lens), x[:17], _meta(TABLES, [0, 0], prompt_lens, False))
        for step in range(3):  # three decode steps of both requests
            starts = [n + step for n in prompt_lens]
            rows = x[17 + 2 * step : 19 + 2 * step]
            absorbed = layer(_positions(starts, [1, 1]), rows, _meta(TABLES, starts, [1, 1], True))
            expanded = layer(_positions(starts, [1, 1]), rows, _meta(TABLES, starts, [1, 1], False))
            torch.testing.assert_close(absorbed, expanded, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("q_lora_rank", [None, 12])
def test_chunked_and_prefix_cached_steps_equal_one_fresh_prefill(q_lora_rank):
    x = torch.randn(13, HIDDEN, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole = _layer(q_lora_rank)(torch.arange(13), x, _meta(TABLES[:1], [0], [13], False))
        layer = _layer(q_lora_rank)
        chunks = [(0, 5), (5, 4), (9, 4)]  # later chunks see their prefix only through the pages
        parts = [
            layer(torch.arange(s, s + n), x[s : s + n], _meta(TABLES[:1], [s], [n], False)) for s, n in chunks
        ]
    torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-5, atol=1e-5)


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
