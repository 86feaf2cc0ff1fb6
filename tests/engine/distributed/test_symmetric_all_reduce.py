"""Choosing the all-reduce path. The symmetric-memory path itself needs CUDA GPUs
(``scripts/gpu/check_all_reduce.py`` checks its sums there); here a stand-in takes its place to check
how ``TPGroup`` dispatches to it, and the CPU / NCCL-only cases need no stand-in at all."""

from __future__ import annotations

import pytest
import torch

from engine.distributed import group as group_module
from engine.distributed import symmetric_all_reduce as sar
from engine.distributed.group import TPGroup


def test_mode_is_what_the_engine_set(monkeypatch):
    """EngineConfig.tp_all_reduce (or $CHASSIS_TP_ALL_REDUCE through it, tests/engine/test_engine_config.py)
    reaches this module through ``set_mode`` when the engine builds."""
    monkeypatch.setattr(sar._switch, "mode", "auto")
    assert sar.all_reduce_mode() == "auto"
    assert sar.set_mode("nccl") == "auto"
    assert sar.all_reduce_mode() == "nccl"
    with pytest.raises(ValueError, match="tp_all_reduce mode 'fastest' is not one of auto, nccl, symmetric"):
        sar.set_mode("fastest")


def test_cpu_ranks_and_nccl_mode_build_nothing(monkeypatch):
    assert sar.build(torch.device("cpu"), 0, 2) is None
    monkeypatch.setattr(sar._switch, "mode", "nccl")
    assert sar.build(torch.device("cuda", 0), 0, 2) is None  # decided before touching the device


class _StandIn:
    """Takes inputs of at most 4 elements, as the real one takes inputs up to MAX_BYTES."""

    def __call__(self, x):
        return x * 2 if x.numel() <= 4 else None


def test_group_uses_the_symmetric_path_for_what_it_takes(monkeypatch):
    monkeypatch.setattr(group_module, "_symmetric", _StandIn())
    calls = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda x, *a, **k: calls.append(x.numel()))
    group = TPGroup(0, 2)
    small = torch.ones(4)
    assert torch.equal(group.all_reduce(small), torch.full((4,), 2.0)) and calls == []
    big = torch.ones(5)
    assert group.all_reduce(big) is big and calls == [5]  # too large: NCCL, in place
    monkeypatch.setattr(group_module, "_symmetric", None)
    assert group.all_reduce(small) is small and calls == [5, 4]


def test_a_single_rank_never_reduces(monkeypatch):
    monkeypatch.setattr(group_module, "_symmetric", _StandIn())
    x = torch.ones(2)
    assert TPGroup(0, 1).all_reduce(x) is x
