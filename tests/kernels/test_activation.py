import pytest
import torch

from kernels.activation import gelu_tanh_and_mul, gelu_tanh_and_mul_torch, silu_and_mul, silu_and_mul_torch
from tests.kernels.tolerances import assert_close


def naive_gelu_tanh_and_mul(x):
    gate, up = x.double().chunk(2, dim=-1)
    return 0.5 * gate * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate**3))) * up


def naive_silu_and_mul(x):
    x64 = x.double()
    gate, up = x64.chunk(2, dim=-1)
    return gate / (1 + torch.exp(-gate)) * up


@pytest.mark.parametrize("shape", [(7, 262), (1, 2), (3, 4000)])
def test_reference_matches_float64(shape):
    x = torch.randn(shape)
    torch.testing.assert_close(silu_and_mul_torch(x).double(), naive_silu_and_mul(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 262), (2, 2 * 1500)])
def test_triton_matches_reference(device, force_triton, shape, dtype):
    x = (torch.randn(shape, device=device) * 3).to(dtype)
    out = silu_and_mul(x)
    assert out.shape == (shape[0], shape[1] // 2)
    assert_close(out, silu_and_mul_torch(x), dtype)


def test_odd_width_is_rejected():
    with pytest.raises(ValueError, match="2\\*intermediate"):
        silu_and_mul(torch.randn(3, 7))


@pytest.mark.parametrize("shape", [(7, 262), (1, 2), (3, 4000)])
def test_gelu_reference_matches_float64(shape):
    x = torch.randn(shape) * 3
    torch.testing.assert_close(
        gelu_tanh_and_mul_torch(x).double(), naive_gelu_tanh_and_mul(x), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 262), (2, 2 * 1500)])
def test_gelu_triton_matches_reference(device, force_triton, shape, dtype):
    x = (torch.randn(shape, device=device) * 3).to(dtype)
    x[0, :4] = torch.tensor([0.0, 1e-4, -30.0, 30.0])  # tanh at 0, near 0 and saturated both ways
    out = gelu_tanh_and_mul(x)
    assert out.shape == (shape[0], shape[1] // 2)
    assert_close(out, gelu_tanh_and_mul_torch(x), dtype)


def test_gelu_odd_width_is_rejected():
    with pytest.raises(ValueError, match="2\\*intermediate"):
        gelu_tanh_and_mul(torch.randn(3, 7))
