import pytest
import torch

from kernels import gemv as gemv_module
from kernels._arrival_counters import arrival_counters
from kernels.activation import silu_and_mul
from kernels.gemv import gemv, gemv_silu, gemv_silu_torch, gemv_torch
from kernels.gemv_configs import GemvConfig
from tests.kernels.tolerances import assert_close

N, K = 70, 200  # neither a multiple of any block: partial N slabs, masked K tails
CONFIGS = {
    "default": None,
    "dot-split4": GemvConfig(16, 64, split_k=4),  # K parts of 64, 64, 64 and 8
    "dot-n32": GemvConfig(32, 32, num_stages=2),
    "fma": GemvConfig(16, 64, use_dot=False),
    "fma-split2": GemvConfig(8, 32, split_k=2, use_dot=False),
}


def make_inputs(device, dtype, rows, gated=False, bias=True):
    x = torch.randn(rows, 2 * K if gated else K, device=device).to(dtype)
    weight = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    b = torch.randn(N, device=device).to(dtype) if bias else None
    return x, weight, b


def rows_for(config_id):
    return [1] if config_id.startswith("fma") else [1, 3, 8]


CASES = [(cid, rows) for cid in CONFIGS for rows in rows_for(cid)]


def test_reference_matches_float64():
    x, weight, bias = make_inputs("cpu", torch.bfloat16, 5)
    expected = x.double() @ weight.double().t() + bias.double()
    torch.testing.assert_close(gemv_torch(x, weight, bias).double(), expected, atol=0.1, rtol=1e-2)
    gate_up = torch.randn(5, 2 * K)
    gate, up = gate_up.double().chunk(2, dim=-1)
    expected = (gate * torch.sigmoid(gate) * up) @ weight.double().t()
    torch.testing.assert_close(
        gemv_silu_torch(gate_up, weight.float()).double(), expected, atol=1e-4, rtol=1e-4
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("config_id", "rows"), CASES)
def test_triton_matches_reference(device, force_triton, dtype, config_id, rows):
    x, weight, bias = make_inputs(device, dtype, rows)
    out = gemv(x, weight, bias, config=CONFIGS[config_id])
    assert out.shape == (rows, N)
    assert_close(out, gemv_torch(x, weight, bias), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("config_id", "rows"), CASES)
def test_silu_variant_is_gemv_of_silu_and_mul(device, force_triton, dtype, config_id, rows):
    gate_up, weight, _ = make_inputs(device, dtype, rows, gated=True, bias=False)
    config = CONFIGS[config_id]
    out = gemv_silu(gate_up, weight, config=config)
    # Same activation rounding as kernels/activation.py, so the same bits as the two-kernel path.
    assert torch.equal(out, gemv(silu_and_mul(gate_up), weight, config=config))
    assert_close(out, gemv_silu_torch(gate_up, weight), dtype)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(("config_id", "rows"), [("dot-split4", 3), ("fma", 1), ("default", 8)])
def test_float32_output_keeps_the_sums_unrounded(device, force_triton, config_id, rows, gated):
    """Tensor-parallel partial products leave in fp32 and are rounded once, after the all-reduce;
    rounding the fp32 output gives the bf16 output (the same sums, one rounding): the same bits on
    a GPU, within one bf16 step under the interpreter (its bf16 stores truncate instead of rounding)."""
    x, weight, _ = make_inputs(device, torch.bfloat16, rows, gated=gated, bias=False)
    product = gemv_silu if gated else gemv
    config = CONFIGS[config_id]
    wide = product(x, weight, config=config, out_dtype=torch.float32)
    assert wide.dtype == torch.float32 and wide.shape == (rows, N)
    narrow = product(x, weight, config=config)
    if device.type == "cuda":
        assert torch.equal(wide.to(torch.bfloat16), narrow)
    else:
        torch.testing.assert_close(wide.to(torch.bfloat16), narrow, atol=0, rtol=2**-7)
    reference = (gemv_silu_torch if gated else gemv_torch)(x, weight, out_dtype=torch.float32)
    assert_close(wide, reference, torch.bfloat16)


@pytest.mark.parametrize("config_id", ["default", "dot-split4", "fma-split2"])
def test_repeated_calls_give_the_same_bits(device, force_triton, config_id):
    x, weight, bias = make_inputs(device, torch.bfloat16, 1)
    first = gemv(x, weight, bias, config=CONFIGS[config_id])
    assert all(torch.equal(first, gemv(x, weight, bias, config=CONFIGS[config_id])) for _ in range(3))


@pytest.mark.parametrize("config_id", ["default", "dot-split4"])
def test_a_row_does_not_depend_on_the_rest_of_the_batch(device, force_triton, config_id):
    """The tensor-core configs pad every batch to 16 rows, so 1..8 rows run the same arithmetic."""
    x, weight, bias = make_inputs(device, torch.bfloat16, 8)
    batch = gemv(x, weight, bias, config=CONFIGS[config_id])
    for i in (0, 5, 7):
        assert torch.equal(batch[i : i + 1], gemv(x[i : i + 1], weight, bias, config=CONFIGS[config_id]))


def test_bad_inputs_are_rejected(force_triton):
    x, weight, bias = make_inputs("cpu", torch.float32, 2)
    with pytest.raises(ValueError, match="1 to 8 rows"):
        gemv(torch.randn(9, K), weight)
    with pytest.raises(ValueError, match="x must be"):
        gemv(x[:, :-1], weight)
    with pytest.raises(ValueError, match="gate_up must be"):
        gemv_silu(x, weight)
    with pytest.raises(ValueError, match="one dtype"):
        gemv(x.double(), weight)
    with pytest.raises(ValueError, match="FMA variant takes one row"):
        gemv(x, weight, bias, config=CONFIGS["fma"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("config_id", "rows"), [c for c in CASES if "split" in c[0]])
@pytest.mark.parametrize("gated", [False, True])
def test_fused_split_reduce_gives_the_bits_of_the_reduce_kernel(
    device, force_triton, monkeypatch, dtype, config_id, rows, gated
):
    """The last K-split program of each N slab adds the partials as the reduce kernel does, in split
    order with the bias last, and leaves the arrival counters at zero for the next call."""
    x, weight, bias = make_inputs(device, dtype, rows, gated=gated)
    op = gemv_silu if gated else gemv
    config = CONFIGS[config_id]
    monkeypatch.setattr(gemv_module, "FUSED_REDUCE", False)
    separate = op(x, weight, bias, config=config)
    monkeypatch.setattr(gemv_module, "FUSED_REDUCE", True)
    monkeypatch.setattr(gemv_module, "_split_reduce_kernel", None)  # a launch of it would fail
    fused = [op(x, weight, bias, config=config) for _ in range(3)]
    assert all(torch.equal(out, separate) for out in fused)
    assert not arrival_counters(device, 1).any()
    reference = gemv_silu_torch(x, weight, bias) if gated else gemv_torch(x, weight, bias)
    assert_close(fused[0], reference, dtype)
