"""A norm followed by a projection folds into one GEMV where the GEMV would run (CPU: interpreter)."""

import pytest
import torch
import torch.nn.functional as F

from engine.layers import linear
from engine.layers.norm import RMSNorm
from kernels import _common, cpu_invariant, gemv_configs, gemv_norm
from kernels.gemv_configs import GemvConfig, GemvTable, TableEntry
from kernels.rms_norm import fused_add_rms_norm, rms_norm
from tests.support.launch_tables import table_at

CPU = torch.device("cpu")
H, N = 96, 40


@pytest.fixture
def fused_launches(monkeypatch):
    """Triton kernels on CPU tensors (interpreter), and a record of every fused launch: (rows, residual)."""
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setattr(_common._switch, "mode", "triton")
    launches = []
    original = gemv_norm._launch

    def counted(x, residual, *args, **kwargs):
        launches.append((x.shape[0], residual is not None))
        return original(x, residual, *args, **kwargs)

    monkeypatch.setattr(gemv_norm, "_launch", counted)
    return launches


def make(rows, residual=True):
    norm = RMSNorm(H, 1e-6, torch.float32, CPU)
    torch.nn.init.normal_(norm.weight, mean=1.0, std=0.2)
    weight, bias = torch.randn(N, H) / H**0.5, torch.randn(N)
    return norm, torch.randn(rows, H), torch.randn(rows, H) if residual else None, weight, bias


@pytest.mark.parametrize("with_residual", [True, False])
def test_decode_rows_take_one_fused_kernel(monkeypatch, fused_launches, with_residual):
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    norm, x, residual, weight, bias = make(3, with_residual)
    y, new_residual = norm.norm_matmul(x, residual, weight, bias)
    if with_residual:
        normed, expected_residual = fused_add_rms_norm(x, residual, norm.weight, norm.eps)
        assert torch.equal(new_residual, expected_residual)
    else:
        normed = rms_norm(x, norm.weight, norm.eps)
        assert new_residual is x
    torch.testing.assert_close(y, F.linear(normed, weight, bias), atol=1e-5, rtol=1e-5)
    assert fused_launches == [(3, with_residual)]


def test_prefill_rows_and_cublas_mode_keep_the_separate_norm(monkeypatch, fused_launches):
    norm, x, residual, weight, bias = make(9)
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    y, new_residual = norm.norm_matmul(x, residual, weight, bias)
    normed, expected_residual = fused_add_rms_norm(x, residual, norm.weight, norm.eps)
    assert torch.equal(y, cpu_invariant.linear(normed, weight, bias)) and torch.equal(
        new_residual, expected_residual
    )
    monkeypatch.setattr(linear.gemv_switch, "mode", "cublas")
    y, _ = norm.norm_matmul(x[:2], residual[:2], weight, bias)
    normed, _ = fused_add_rms_norm(x[:2], residual[:2], norm.weight, norm.eps)
    assert torch.equal(y, cpu_invariant.linear(normed, weight, bias))
    assert fused_launches == []


def test_auto_mode_fuses_where_the_table_picks_the_gemv(monkeypatch, tmp_path, fused_launches):
    path = tmp_path / "table.json"
    entries = {
        (1, N, H, False): TableEntry("triton", GemvConfig(16, 32)),
        (2, N, H, False): TableEntry("cublas", GemvConfig(16, 32)),
    }
    GemvTable("cpu", entries).save(path)
    monkeypatch.setattr(linear.gemv_switch, "mode", "auto")
    norm, x, residual, weight, _ = make(2)
    with table_at(gemv_configs, path, monkeypatch):
        norm.norm_matmul(x[:1], residual[:1], weight)
        norm.norm_matmul(x, residual, weight)  # cuBLAS measured faster at 2 rows: norm, then cuBLAS
    assert fused_launches == [(1, True)]
