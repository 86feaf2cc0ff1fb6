import json

import pytest
import torch

from kernels import fused_moe_configs
from kernels.fused_moe_configs import (
    SMALL_BATCH_MAX_PAIRS,
    MoeConfig,
    MoeGemvConfig,
    MoeTable,
    choose_config,
    default_config,
    default_gemv_config,
    token_bucket,
)
from tests.support.launch_tables import table_at

CPU = torch.device("cpu")


@pytest.fixture
def table_path(tmp_path, monkeypatch):
    with table_at(fused_moe_configs, tmp_path / "fused_moe_table.json", monkeypatch) as path:
        yield path


def test_token_buckets():
    assert [token_bucket(t) for t in (0, 1, 3, 64, 65, 10_000)] == [1, 1, 4, 64, 128, 4096]


def test_default_tiles_grow_with_rows_per_expert():
    decode, prefill = default_config(1, 6, 64), default_config(2048, 6, 64)
    assert decode.block_m == 16 and prefill.block_m == 64


def test_tiles_must_suit_tl_dot():
    with pytest.raises(ValueError, match="block_k"):
        MoeConfig(block_m=16, block_n=32, block_k=8)


def test_table_entry_overrides_the_default_on_its_device_only(table_path):
    measured = MoeConfig(32, 128, 64, 8, 2)
    MoeTable("cpu", {(16, 64, 2048, 1408): measured}).save(table_path)
    assert choose_config(12, 6, 64, 2048, 1408, CPU) == measured
    assert choose_config(17, 6, 64, 2048, 1408, CPU) == default_config(17, 6, 64)

    table_path.write_text(json.dumps({**json.loads(table_path.read_text()), "device": "NVIDIA H200"}))
    fused_moe_configs.load_table.cache_clear()
    assert choose_config(12, 6, 64, 2048, 1408, CPU) == default_config(12, 6, 64)


def test_fused_shared_experts_take_the_entry_of_the_routed_ones(table_path):
    """DeepSeek-V2-Lite with its 2 shared experts fused runs 66 experts, top 6 + 2: the table's
    64-expert entry of the same bucket and shapes serves it; one 50 % off does not."""
    measured, other = MoeConfig(128, 128, 64, 8, 3), MoeConfig(64, 128, 64, 4, 3)
    MoeTable("cpu", {(2048, 64, 2048, 1408): measured, (2048, 128, 2048, 1408): other}).save(table_path)
    assert choose_config(2048, 8, 66, 2048, 1408, CPU) == measured
    assert choose_config(1500, 8, 66, 2048, 1408, CPU) == measured  # same bucket
    assert choose_config(2048, 8, 96, 2048, 1408, CPU) == default_config(2048, 8, 96)
    assert choose_config(2048, 8, 66, 2048, 768, CPU) == default_config(2048, 8, 66)  # other shapes


def test_missing_table_falls_back_to_the_default(table_path):
    assert not table_path.exists()
    assert choose_config(1, 8, 128, 2048, 768, CPU) == default_gemv_config()
    assert choose_config(9, 8, 128, 2048, 768, CPU) == default_config(9, 8, 128)


def test_small_batches_take_the_gemv_path_up_to_the_threshold(table_path):
    tokens = SMALL_BATCH_MAX_PAIRS // 8
    assert isinstance(choose_config(tokens, 8, 128, 2048, 768, CPU), MoeGemvConfig)
    assert isinstance(choose_config(tokens + 1, 8, 128, 2048, 768, CPU), MoeConfig)


def test_table_sets_small_batch_tiles_and_its_grouped_entries_below_the_threshold_are_not_used(table_path):
    small = MoeGemvConfig(up_block_n=32, down_block_n=16, block_k=128, num_warps=8, num_stages=3)
    grouped = MoeConfig(16, 64, 128)
    MoeTable("cpu", {(1, 128, 2048, 768): small, (2, 128, 2048, 768): grouped}).save(table_path)
    assert MoeTable.load(table_path).entries[(1, 128, 2048, 768)] == small
    assert choose_config(1, 8, 128, 2048, 768, CPU) == small
    assert choose_config(2, 8, 128, 2048, 768, CPU) == default_gemv_config()


def test_shipped_table_loads():
    assert MoeTable.load(fused_moe_configs.DEFAULT_TABLE).device == "NVIDIA H200"
