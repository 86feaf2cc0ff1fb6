import logging

import torch

from kernels import _common, invariant_matmul
from kernels._config_table import device_name
from kernels.invariant_matmul_configs import (
    MatmulConfig,
    MatmulTable,
    config_for,
    load_table,
    reference_config,
    row_bucket,
    verify_table,
)

N, K = 70, 200
BF16 = torch.bfloat16
# The reference's K step (128): in the interpreter the K step sets the fp32 sums' grouping, which on
# a GPU the MMA's k16 chain does not (kernels/invariant_matmul_configs.py).
NARROW, WIDE = MatmulConfig(16, 16, 128, 4, 2), MatmulConfig(128, 128, 128, 8, 3)


def _weight(device, dtype=BF16):
    return (torch.randn(N, K, device=device) / K**0.5).to(dtype)


def _save(path, device, entries):
    MatmulTable(device_name(device), entries).save(path, {"triton": "test"})


def test_row_buckets():
    assert [row_bucket(r) for r in (0, 1, 2, 3, 5, 8, 9, 200, 256, 257, 8192)] == [
        1, 1, 2, 4, 8, 8, 16, 256, 256, 512, 8192,
    ]  # fmt: skip
    assert row_bucket(8193) == row_bucket(100_000) == 8192


def test_labels_round_trip():
    assert MatmulConfig.parse(WIDE.label()) == WIDE and WIDE.label() == "128x128x128/8/3"


def test_table_round_trip(matmul_table):
    entries = {("bfloat16", N, K, 1): NARROW, ("float16", 4096, 4096, 2048): WIDE}
    MatmulTable("NVIDIA H200", entries).save(matmul_table, {"torch": "x"})
    table = load_table(str(matmul_table))
    assert table.device == "NVIDIA H200" and table.entries == entries


def test_an_unverified_entry_is_not_used(matmul_table):
    cpu = torch.device("cpu")
    _save(matmul_table, cpu, {("bfloat16", N, K, 1): NARROW})
    assert config_for(BF16, N, K, 1, cpu) == reference_config(N, K)


def test_verification_keeps_entries_that_match_and_uses_them(
    device, force_triton, row_invariant_dot, matmul_table, monkeypatch
):
    _save(matmul_table, device, {("bfloat16", N, K, 1): NARROW, ("bfloat16", N, K, 128): WIDE})
    weight = _weight(device)
    report = verify_table([weight, weight.clone(), torch.zeros(N, 100, dtype=BF16, device=device)])
    assert (report.verified, report.dropped) == (2, [])
    on = weight.device  # a tensor's own: cuda:0, not cuda
    assert config_for(BF16, N, K, 1, on) == NARROW
    assert config_for(BF16, N, K, 100, on) == WIDE  # bucket 128
    assert config_for(BF16, N, K, 2, on) == reference_config(N, K)  # no entry for bucket 2
    launched = []
    original = invariant_matmul._launch
    monkeypatch.setattr(invariant_matmul, "_launch", lambda *a: launched.append(a[3]) or original(*a))
    x = torch.randn(1, K, device=device).to(BF16)
    invariant_matmul.invariant_matmul(x, weight)
    invariant_matmul.invariant_matmul(torch.cat([x] * 3), weight)
    assert launched == [NARROW, reference_config(N, K)]


def test_an_entry_whose_bits_differ_is_dropped(device, force_triton, row_invariant_dot, matmul_table, caplog):
    _save(matmul_table, device, {("bfloat16", N, K, 1): NARROW, ("bfloat16", N, K, 512): WIDE})

    def run(x, weight, config):
        out = invariant_matmul.invariant_matmul(x, weight, config=config)
        return out + 1 if config == WIDE else out  # as if WIDE summed in another order here

    weight = _weight(device)
    with caplog.at_level(logging.WARNING):
        report = verify_table([weight], run=run)
    assert report.verified == 1 and report.dropped == [f"bfloat16 {N}x{K} rows<=512 {WIDE.label()}"]
    assert "rows<=512 128x128x128/8/3 differs from the reference" in caplog.text
    assert config_for(BF16, N, K, 300, weight.device) == reference_config(N, K)
    assert config_for(BF16, N, K, 1, weight.device) == NARROW


def test_entries_for_another_device_fp32_or_absent_shapes_are_never_verified(matmul_table, monkeypatch):
    monkeypatch.setattr(_common._switch, "mode", "triton")  # no entry here may reach a kernel
    cpu = torch.device("cpu")
    MatmulTable("Another GPU", {("bfloat16", N, K, 1): NARROW}).save(matmul_table)
    assert verify_table([_weight(cpu)]).verified == 0
    _save(matmul_table, cpu, {("float32", N, K, 1): NARROW, ("bfloat16", N + 1, K, 1): NARROW})
    load_table.cache_clear()
    assert verify_table([_weight(cpu, torch.float32), _weight(cpu)]).verified == 0
    assert config_for(torch.float32, N, K, 1, cpu) == reference_config(N, K)


def test_without_triton_nothing_is_verified(matmul_table, force_torch):
    cpu = torch.device("cpu")
    _save(matmul_table, cpu, {("bfloat16", N, K, 1): NARROW})
    assert verify_table([_weight(cpu)]).verified == 0
