import pytest
import torch

from kernels.rms_norm import fused_add_rms_norm, fused_add_rms_norm_torch, rms_norm, rms_norm_torch
from tests.kernels.tolerances import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(7, 131), (1, 64), (3, 1000)]


def naive_rms_norm(x, weight, eps):
    x64 = x.double()
    return x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


@pytest.mark.parametrize("shape", SHAPES)
def test_reference_matches_float64(shape):
    x, weight = torch.randn(shape), torch.randn(shape[1])
    torch.testing.assert_close(
        rms_norm_torch(x, weight, 1e-6).double(), naive_rms_norm(x, weight, 1e-6), atol=1e-6, rtol=1e-6
    )


def test_reference_matches_hf_llama_rms_norm():
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf = LlamaRMSNorm(131, eps=1e-5).to(torch.bfloat16)
    torch.nn.init.normal_(hf.weight)
    x = torch.randn(7, 131, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(rms_norm_torch(x, hf.weight, 1e-5), hf(x), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_triton_matches_reference(device, force_triton, shape, dtype):
    x = torch.randn(shape, device=device).to(dtype)
    weight = torch.randn(shape[1], device=device).to(dtype)
    assert_close(rms_norm(x, weight, 1e-6), rms_norm_torch(x, weight, 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_fused_add_matches_reference(device, force_triton, dtype):
    x = torch.randn(7, 131, device=device).to(dtype)
    residual = torch.randn(7, 131, device=device).to(dtype)
    weight = torch.randn(131, device=device).to(dtype)
    x_before, residual_before = x.clone(), residual.clone()
    out, new_residual = fused_add_rms_norm(x, residual, weight, 1e-6)
    ref_out, ref_residual = fused_add_rms_norm_torch(x, residual, weight, 1e-6)
    assert_close(out, ref_out, dtype)
    assert_close(new_residual, ref_residual, dtype)
    assert torch.equal(x, x_before) and torch.equal(residual, residual_before)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fp32_sums_are_rounded_to_the_residual_dtype_first(device, force_triton, dtype):
    """Tensor-parallel products hand their all-reduced fp32 sums straight to the fused add + norm:
    the result is that of casting them first (the same bits on a GPU; one rounding step apart under
    the interpreter, whose casts truncate)."""
    wide = torch.randn(7, 131, device=device) * 3
    residual = torch.randn(7, 131, device=device).to(dtype)
    weight = torch.randn(131, device=device).to(dtype)
    out, new_residual = fused_add_rms_norm(wide, residual, weight, 1e-6)
    cast_out, cast_residual = fused_add_rms_norm(wide.to(dtype), residual, weight, 1e-6)
    assert out.dtype == new_residual.dtype == dtype
    if device.type == "cuda":
        assert torch.equal(out, cast_out) and torch.equal(new_residual, cast_residual)
    else:
        assert_close(out, cast_out, dtype)
        assert_close(new_residual, cast_residual, dtype)
    ref_out, ref_residual = fused_add_rms_norm_torch(wide, residual, weight, 1e-6)
    assert torch.equal(ref_residual, wide.to(dtype) + residual)
    assert_close(out, ref_out, dtype)


def test_triton_reads_strided_rows(device, force_triton):
    wide = torch.randn(5, 300, device=device)
    x = wide[:, :131]
    weight = torch.randn(131, device=device)
    assert_close(rms_norm(x, weight, 1e-6), rms_norm_torch(x, weight, 1e-6), torch.float32)


def test_torch_mode_uses_reference(force_torch):
    x, weight = torch.randn(4, 32), torch.randn(32)
    torch.testing.assert_close(rms_norm(x, weight, 1e-6), rms_norm_torch(x, weight, 1e-6), atol=0, rtol=0)


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="weight"):
        rms_norm(torch.randn(4, 32), torch.randn(31), 1e-6)
    with pytest.raises(ValueError, match="tokens, hidden"):
        rms_norm(torch.randn(32), torch.randn(32), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        fused_add_rms_norm(torch.randn(4, 32), torch.randn(4, 33), torch.randn(32), 1e-6)
    with pytest.raises(ValueError, match="residual"):  # only fp32 may be wider than the residual
        fused_add_rms_norm(torch.randn(4, 32).half(), torch.randn(4, 32).bfloat16(), torch.randn(32), 1e-6)


def _gemma_norm(size: int, dtype):
    from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm

    hf = Gemma2RMSNorm(size, eps=1e-6).to(dtype)
    torch.nn.init.normal_(hf.weight, std=2.0)  # scales far from 1, where 1 + w in bf16 loses digits
    return hf


def test_gemma_order_reference_matches_hf_gemma_rms_norm():
    """Gemma multiplies the fp32 normalised value by 1 + w in fp32 and rounds once: with the weight
    kept in fp32 and round_normed off, the same bits."""
    pytest.importorskip("transformers")
    hf = _gemma_norm(131, torch.bfloat16)
    x = torch.randn(7, 131, dtype=torch.bfloat16)
    weight = hf.weight.float() + 1.0
    with torch.no_grad():
        torch.testing.assert_close(rms_norm_torch(x, weight, 1e-6, round_normed=False), hf(x), atol=0, rtol=0)
        assert not torch.equal(rms_norm_torch(x, weight.to(torch.bfloat16), 1e-6), hf(x))  # Llama's order


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_gemma_order_matches_reference(device, force_triton, dtype):
    x = torch.randn(7, 131, device=device).to(dtype)
    residual = torch.randn(7, 131, device=device).to(dtype)
    weight = torch.randn(131, device=device) + 1.0  # fp32 beside a narrower x
    assert_close(rms_norm(x, weight, 1e-6, False), rms_norm_torch(x, weight, 1e-6, False), dtype)
    out, new_residual = fused_add_rms_norm(x, residual, weight, 1e-6, False)
    ref_out, ref_residual = fused_add_rms_norm_torch(x, residual, weight, 1e-6, False)
    assert_close(out, ref_out, dtype)
    assert_close(new_residual, ref_residual, dtype)
