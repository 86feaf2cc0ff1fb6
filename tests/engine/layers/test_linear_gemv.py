"""Decode-sized products take the Triton GEMV when the gemv mode allows it (CPU: under the interpreter)."""

import pytest
import torch
import torch.nn.functional as F

from engine.distributed.group import TPGroup
from engine.layers import linear
from engine.layers.linear import Linear, takes_gemv
from engine.layers.mlp import GatedMLP
from engine.layers.parallel_linear import RowParallelLinear
from kernels import _common, cpu_invariant, gemv, gemv_configs
from kernels.activation import silu_and_mul
from kernels.gemv_configs import GemvConfig, GemvTable, TableEntry
from tests.support.launch_tables import table_at

CPU = torch.device("cpu")


@pytest.fixture
def gemv_launches(monkeypatch):
    """Triton kernels on CPU tensors (interpreter), and a record of every GEMV launch: (rows, gated)."""
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setattr(_common._switch, "mode", "triton")
    launches = []
    original = gemv._launch

    def counted(x, weight, bias, gated, config=None, **kwargs):
        launches.append((x.shape[0], gated))
        return original(x, weight, bias, gated, config, **kwargs)

    monkeypatch.setattr(gemv, "_launch", counted)
    return launches


def filled_linear(k, n, bias):
    layer = Linear(k, n, bias, torch.float32, CPU)
    torch.nn.init.normal_(layer.weight, std=k**-0.5)
    if bias:
        torch.nn.init.normal_(layer.bias)
    return layer


def test_modes(monkeypatch):
    monkeypatch.setattr(linear.gemv_switch, "mode", "auto")
    assert linear.set_gemv_mode("triton") == "auto"
    assert linear.gemv_mode() == "triton"
    with pytest.raises(ValueError, match="gemv mode 'cutlass'"):
        linear.set_gemv_mode("cutlass")


@pytest.mark.parametrize("rows", [1, 8, 9])
def test_forced_gemv_takes_up_to_eight_rows(monkeypatch, gemv_launches, rows):
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    layer = filled_linear(96, 40, bias=True)
    x = torch.randn(rows, 96)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    assert gemv_launches == ([(rows, False)] if rows <= 8 else [])


def test_cublas_mode_and_torch_kernels_never_take_it(monkeypatch, gemv_launches):
    layer = filled_linear(96, 40, bias=False)
    x = torch.randn(2, 96)
    monkeypatch.setattr(linear.gemv_switch, "mode", "cublas")
    assert torch.equal(layer(x), cpu_invariant.linear(x, layer.weight))
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    monkeypatch.setattr(_common._switch, "mode", "torch")
    assert torch.equal(layer(x), cpu_invariant.linear(x, layer.weight))
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
    monkeypatch.setattr(linear.gemv_switch, "mode", "auto")
    weight = torch.randn(40, 96)
    with table_at(gemv_configs, path, monkeypatch):
        assert takes_gemv(torch.randn(1, 96), weight)
        assert not takes_gemv(torch.randn(2, 96), weight)  # cuBLAS measured faster
        assert not takes_gemv(torch.randn(4, 96), weight)  # not measured


def test_mlp_folds_the_activation_into_the_down_projection(monkeypatch, gemv_launches):
    mlp = GatedMLP(48, 80, torch.float32, CPU)
    for p in mlp.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(3, 48)
    expected = F.linear(silu_and_mul(F.linear(x, mlp.gate_up_proj.weight)), mlp.down_proj.weight)
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    torch.testing.assert_close(mlp(x), expected, atol=1e-5, rtol=1e-5)
    assert gemv_launches == [(3, False), (3, True)]


class _RecordingGroup(TPGroup):
    """Rank 0 of 2 whose all-reduce records what it was given and adds nothing (as if the other
    rank's partial were zero): the layer's wiring without processes; tests/engine/distributed runs
    the real collective."""

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        reduced.append(x.dtype)
        return x


reduced: list[torch.dtype] = []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_parallel_takes_the_gemv_and_reduces_its_fp32_sums(monkeypatch, gemv_launches, dtype):
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    reduced.clear()
    split = RowParallelLinear(64, (0, 32), 16, False, dtype, CPU, _RecordingGroup(0, 2))
    torch.nn.init.normal_(split.weight)
    x = torch.randn(2, 32).to(dtype)
    out = split(x)
    assert out.dtype == dtype and out.shape == (2, 16)
    expected = (x.float() @ split.weight.float().t()).to(dtype)
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    gate_up = torch.randn(2, 64).to(dtype)
    assert split.fuses_silu(gate_up)
    fused = split.forward_silu(gate_up)
    torch.testing.assert_close(fused, split(silu_and_mul(gate_up)), atol=2e-2, rtol=2e-2)
    assert gemv_launches == [(2, False), (2, True), (2, False)]
    assert reduced == [torch.float32] * 3  # partial sums cross the ranks unrounded


def test_row_parallel_prefill_sums_fp32_partials_too(monkeypatch, gemv_launches):
    reduced.clear()
    split = RowParallelLinear(64, (0, 32), 16, False, torch.bfloat16, CPU, _RecordingGroup(0, 2))
    out = split(torch.randn(12, 32).to(torch.bfloat16))  # 12 rows: past the GEMV's 8
    assert out.dtype == torch.bfloat16 and gemv_launches == [] and reduced == [torch.float32]


def test_row_parallel_can_leave_the_rounding_to_its_consumer(monkeypatch, gemv_launches):
    """In a decoder layer o_proj and down_proj hand their fp32 sums to the fused add + RMSNorm."""
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    split = RowParallelLinear(64, (0, 32), 16, False, torch.bfloat16, CPU, _RecordingGroup(0, 2))
    torch.nn.init.normal_(split.weight)
    x = torch.randn(2, 32).to(torch.bfloat16)
    rounded = split(x)
    split.rounds_output = False
    wide = split(x)
    assert wide.dtype == torch.float32 and rounded.dtype == torch.bfloat16
    torch.testing.assert_close(wide.to(torch.bfloat16), rounded, atol=0, rtol=2**-7)
