"""KV groups from per-layer specs (engine/kv/layout.py): which layers keep only their windows, where
a prefix hit's replay starts, and how many blocks a window group can need."""

import pytest

from engine.kv.layout import KVLayout
from engine.kv.specs import FullAttentionSpec, SlidingWindowSpec

SHAPE = dict(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16)
FULL = FullAttentionSpec(**SHAPE)


def local(window: int = 64) -> SlidingWindowSpec:
    return SlidingWindowSpec(**SHAPE, window=window)


def test_interleaved_layers_form_a_main_and_a_window_group():
    layout = KVLayout.from_specs([local(), FULL, local(), FULL], "bounded-replay", 140)
    assert layout.main_layers == (1, 3) and layout.window_layers == (0, 2)
    assert layout.hybrid and not layout.all_windowed and layout.window == 64


@pytest.mark.parametrize("mode", ["full-context", "bounded-replay"])
def test_full_context_or_no_window_is_one_whole_context_group(mode):
    specs = [local(), FULL] if mode == "full-context" else [FULL, FULL]
    layout = KVLayout.from_specs(specs, mode, 140)
    assert layout.main_layers == (0, 1) and not layout.has_window_group
    assert layout.replay_start(320) == 320  # a hit is reused whole


def test_every_layer_windowed_is_one_windowed_group():
    layout = KVLayout.from_specs([local(24), local(24)], "bounded-replay", 140)
    assert layout.all_windowed and layout.main_layers == () and layout.window == 24


def test_bounded_replay_starts_window_plus_margin_before_the_hit_on_a_block_boundary():
    layout = KVLayout.from_specs([local(64), FULL], "bounded-replay", 140)
    assert layout.replay_start(1024) == (1024 - 64 - 140) // 16 * 16 == 816
    assert layout.replay_start(200) == 0  # a hit shorter than window + margin recomputes it all
    assert KVLayout.from_specs([local(64), FULL], "full-replay", 140).replay_start(1024) == 0


def test_a_step_needs_the_blocks_of_its_first_querys_window_and_one_token_more():
    layout = KVLayout.from_specs([local(64), FULL], "bounded-replay")
    assert layout.first_needed_block(0) == 0
    assert layout.first_needed_block(100) == (100 - 64) // 16 == 2
    # Batch-invariant attention's key tiles (256 on CPU) are aligned to the positions it sees.
    aligned = KVLayout.from_specs([local(64), FULL], "bounded-replay", 140, base_alignment=256)
    assert aligned.first_needed_block(600) == 512 // 16  # 536 rounded down to a tile
    assert aligned.replay_start(1024) == 768


def test_window_blocks_bound_and_the_exact_margin():
    layout = KVLayout.from_specs([local(64), FULL, local(64), FULL, local(64)], "bounded-replay", 140)
    assert layout.window_blocks_bound(max_num_seqs=8, max_num_batched_tokens=512) == 8 * (4 + 2) + 32
    assert layout.exact_replay_margin() == 2 * 63  # three windowed layers: two reach back past the first


def test_base_alignment_must_be_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 16"):
        KVLayout(16, (0,), (1,), 64, "bounded-replay", 0, base_alignment=24)
