"""In batch-invariant mode the model runner has the invariant GEMM's tile table verified over every
product's weight as soon as the weights load (engine/runner/invariant_tiles.py), so an entry that
matches the reference is used from the first step on; normal mode never looks at the table."""

from __future__ import annotations

import logging

import pytest
import torch

from engine import LLM
from engine.checkpoint import load_model_config
from engine.runner import invariant_tiles
from kernels import invariant_matmul_configs
from kernels.invariant_matmul_configs import MatmulConfig, MatmulTable, config_for, reference_config
from tests.support.launch_tables import table_at
from tests.support.row_invariant_dot import install_row_invariant_dot

CPU = torch.device("cpu")
NARROW = MatmulConfig(16, 16, 128, 4, 2)  # the reference's K step: the interpreter's sums group by it


@pytest.fixture
def verified_shapes(tmp_path, monkeypatch):
    """Every call's weight shapes; the runner reads a table of the test's own, for this CPU."""
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setenv("CHASSIS_KERNELS", "triton")
    install_row_invariant_dot(monkeypatch)
    monkeypatch.setattr(invariant_matmul_configs, "_verified", {})
    calls = []
    original = invariant_tiles.verify_table

    def recording(weights):
        weights = list(weights)
        calls.append(sorted(tuple(w.shape) for w in weights))
        return original(weights)

    monkeypatch.setattr(invariant_tiles, "verify_table", recording)
    with table_at(invariant_matmul_configs, tmp_path / "invariant_matmul_table.json", monkeypatch) as path:
        yield calls, path


def _products(cfg) -> list[tuple[int, int]]:
    """(N, K) of every product: per layer fused q/k/v, o, fused gate/up and down; the LM head."""
    hidden, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = [
        (q + 2 * kv, hidden),
        (hidden, q),
        (2 * cfg.intermediate_size, hidden),
        (hidden, cfg.intermediate_size),
    ]
    return sorted(per_layer * cfg.num_layers + [(cfg.vocab_size, hidden)])


def test_the_runner_verifies_the_table_over_every_product(tiny_llama, verified_shapes, caplog):
    calls, path = verified_shapes
    cfg = load_model_config(tiny_llama)
    qkv = ((cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim, cfg.hidden_size)
    MatmulTable("cpu", {("bfloat16", *qkv, 1): NARROW}).save(path)
    with caplog.at_level(logging.INFO, logger=invariant_tiles.__name__):
        LLM(tiny_llama, device="cpu", dtype="bfloat16", batch_invariant=True)
    assert calls == [_products(cfg)]
    assert "1 table entries verified, 0 dropped" in caplog.text
    assert config_for(torch.bfloat16, *qkv, 1, CPU) == NARROW
    assert config_for(torch.bfloat16, *qkv, 2, CPU) == reference_config(*qkv)


def test_normal_mode_never_verifies(tiny_llama, verified_shapes):
    calls, _ = verified_shapes
    LLM(tiny_llama, device="cpu", dtype="bfloat16")
    assert calls == []
