import pytest
import torch

from kernels import gemv_configs
from kernels.gemv_configs import (
    GemvConfig,
    GemvTable,
    TableEntry,
    candidate_configs,
    choose_config,
    default_config,
    row_bucket,
    table_entry,
)
from tests.support.launch_tables import table_at

CPU = torch.device("cpu")


@pytest.fixture
def table_path(tmp_path, monkeypatch):
    with table_at(gemv_configs, tmp_path / "gemv_table.json", monkeypatch) as path:
        yield path


def test_row_buckets():
    assert [row_bucket(r) for r in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
    with pytest.raises(ValueError):
        row_bucket(9)


def test_default_config_is_the_same_for_every_row_count():
    """One config (and so one reduction order) for 1..8 rows keeps a row's bits batch-independent."""
    configs = {default_config(rows, 4096, 4096, 132) for rows in range(1, 9)}
    assert len(configs) == 1 and next(iter(configs)).use_dot


def test_default_config_fills_the_gpu():
    for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096), (512, 4096)):
        config = default_config(1, n, k, 132)
        programs = -(-n // config.block_n) * config.split_k
        assert programs >= 132, (n, k, config)
        assert k >= config.block_k * config.split_k


def test_candidates_offer_fma_for_one_row_and_splits_only_where_programs_are_few():
    one, eight = candidate_configs(1, 4096, 4096, 132), candidate_configs(8, 4096, 4096, 132)
    assert any(not c.use_dot for c in one) and all(c.use_dot for c in eight)
    assert all(c.split_k == 1 for c in candidate_configs(1, 128256, 4096, 132))
    assert any(c.split_k > 1 for c in one)
    assert len(set(one)) == len(one)


def test_table_round_trip_and_lookup(table_path):
    best = GemvConfig(32, 256, 4, 3, 2, True)
    table = GemvTable("cpu", {(1, 4096, 4096, False): TableEntry("triton", best)})
    table.save(table_path, {"triton": "3.6.0"})
    assert table_entry(1, 4096, 4096, False, CPU) == TableEntry("triton", best)
    assert choose_config(1, 4096, 4096, False, CPU) == best
    assert table_entry(2, 4096, 4096, False, CPU) is None  # other row bucket
    assert table_entry(1, 4096, 4096, True, CPU) is None  # the gated variant is its own entry
    assert choose_config(2, 4096, 4096, False, CPU) == default_config(2, 4096, 4096, 16)


def test_a_table_from_another_device_is_ignored(table_path):
    table = GemvTable("NVIDIA H200", {(1, 64, 64, False): TableEntry("triton", GemvConfig(16, 64))})
    table.save(table_path)
    assert table_entry(1, 64, 64, False, CPU) is None


def test_missing_table_means_no_entries(table_path):
    assert not table_path.exists()
    assert table_entry(1, 64, 64, False, CPU) is None


def test_normed_entries_fall_back_to_the_plain_gemv_entry(table_path):
    plain, fused = GemvConfig(16, 256, 4, 2, 1, False), GemvConfig(32, 256, 4, 3, 1, True)
    table = GemvTable(
        "cpu",
        {
            (1, 6144, 4096, False): TableEntry("triton", plain),
            (1, 28672, 4096, False): TableEntry("triton", plain),
            (1, 28672, 4096, False, True): TableEntry("triton", fused),
        },
    )
    table.save(table_path)
    assert choose_config(1, 28672, 4096, False, CPU, normed=True) == fused
    assert choose_config(1, 28672, 4096, False, CPU) == plain  # the plain GEMV keeps its own entry
    assert choose_config(1, 6144, 4096, False, CPU, normed=True) == plain  # not measured fused
    assert table_entry(2, 6144, 4096, False, CPU, normed=True) is None
