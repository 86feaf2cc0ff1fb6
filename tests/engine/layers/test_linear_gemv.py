"""Decode-sized products take the Triton GEMV when CHASSIS_GEMV allows it (CPU: under the interpreter)."""

import pytest
import torch
import torch.nn.functional as F

from engine.distributed.group import SINGLE, TPGroup
from engine.layers import linear
from engine.layers.linear import Linear, takes_gemv
from engine.layers.mlp import GatedMLP
from engine.layers.parallel_linear import RowParallelLinear
from kernels import gemv, gemv_configs
from kernels.activation import silu_and_mul
from kernels.gemv_configs import GemvConfig, GemvTable, TableEntry

CPU = torch.device("cpu")


@pytest.fixture
def gemv_launches(monkeypatch):
    """Triton kernels on CPU tensors (interpreter), and a record of every GEMV launch: (rows, gated)."""
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setenv("CHASSIS_KERNELS", "triton")
    launches = []
    original = gemv._launch

    def counted(x, weight, bias, gated, config=None):
        launches.append((x.shape[0], gated))
        return original(x, weight, bias, gated, config)

    monkeypatch.setattr(gemv, "_launch", counted)
    return launches


def filled_linear(k, n, bias):
    layer = Linear(k, n, bias, torch.float32, CPU)
    torch.nn.init.normal_(layer.weight, std=k**-0.5)
    if bias:
        torch.nn.init.normal_(layer.bias)
    return layer


def test_modes(monkeypatch):
    monkeypatch.delenv(linear.GEMV_ENV, raising=False)
    assert linear.gemv_mode() == "auto"
    monkeypatch.setenv(linear.GEMV_ENV, "Triton")
    assert linear.gemv_mode() == "triton"
    monkeypatch.setenv(linear.GEMV_ENV, "cutlass")
    with pytest.raises(ValueError, match="CHASSIS_GEMV"):
        linear.gemv_mode()


@pytest.mark.parametrize("rows", [1, 8, 9])
def test_forced_gemv_takes_up_to_eight_rows(monkeypatch, gemv_launches, rows):
    monkeypatch.setenv(linear.GEMV_ENV, "triton")
    layer = filled_linear(96, 40, bias=True)
    x = torch.randn(rows, 96)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    assert gemv_launches == ([(rows, False)] if rows <= 8 else [])


def test_cublas_mode_and_torch_kernels_never_take_it(monkeypatch, gemv_launches):
    layer = filled_linear(96, 40, bias=False)
    x = torch.randn(2, 96)
    monkeypatch.setenv(linear.GEMV_ENV, "cublas")
    assert torch.equal(layer(x), F.linear(x, layer.weight))
    monkeypatch.setenv(linear.GEMV_ENV, "triton")
    monkeypatch.setenv("CHASSIS_KERNELS", "torch")
    assert torch.equal(layer(x), F.linear(x, layer.weight))
    assert gemv_launches == []


def test_auto_mode_follows_the_measured_table(monkeypatch, tmp_path, gemv_launches):
    path = tmp_path / "table.json"
    table = GemvTable(
        "cpu",
        {
            (1, 40, 96, False): TableEntry("triton", GemvConfig(16, 32)),
            (2, 40, 96, False): TableEntry("cublas", GemvConfig(16, 32)),
        },
    )
    table.save(path)
    monkeypatch.setenv(gemv_configs.TABLE_ENV, str(path))
    monkeypatch.setenv(linear.GEMV_ENV, "auto")
    gemv_configs.load_table.cache_clear()
    weight = torch.randn(40, 96)
    try:
        assert takes_gemv(torch.randn(1, 96), weight)
        assert not takes_gemv(torch.randn(2, 96), weight)  # cuBLAS measured faster
        assert not takes_gemv(torch.randn(4, 96), weight)  # not measured
    finally:
        gemv_configs.load_table.cache_clear()


def test_mlp_folds_the_activation_into_the_down_projection(monkeypatch, gemv_launches):
    mlp = GatedMLP(48, 80, torch.float32, CPU)
    for p in mlp.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(3, 48)
    expected = F.linear(silu_and_mul(F.linear(x, mlp.gate_up_proj.weight)), mlp.down_proj.weight)
    monkeypatch.setenv(linear.GEMV_ENV, "triton")
    torch.testing.assert_close(mlp(x), expected, atol=1e-5, rtol=1e-5)
    assert gemv_launches == [(3, False), (3, True)]


def test_row_parallel_uses_the_gemv_only_on_a_single_rank(monkeypatch, gemv_launches):
    monkeypatch.setenv(linear.GEMV_ENV, "triton")
    single = RowParallelLinear(64, (0, 64), 16, False, torch.float32, CPU, SINGLE)
    split = RowParallelLinear(64, (0, 32), 16, False, torch.float32, CPU, TPGroup(0, 2))
    torch.nn.init.normal_(single.weight)
    x = torch.randn(2, 64)
    torch.testing.assert_close(single(x), F.linear(x, single.weight), atol=1e-4, rtol=1e-5)
    assert single.fuses_silu(torch.randn(2, 128)) and not split.fuses_silu(torch.randn(2, 64))
    assert gemv_launches == [(2, False)]
