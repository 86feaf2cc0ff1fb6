"""4-bit projection weights on a CPU: a Linear whose every slice comes 4-bit packs them for torch's
int4 kernel and multiplies as its dequantized weight does; a dense slice, or a shape the kernel
cannot pack, leaves the weight dense with the dequantized values."""

import numpy as np
import torch
from gguf.constants import GGMLQuantizationType
from gguf.quants import quantize

from engine.checkpoint.gguf_int4 import unpack_int4
from engine.layers.int4_weight import PackedInt4Weight
from engine.layers.linear import Linear, matmul


def _int4(rows, cols, seed):
    weight = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32) * 0.05
    return unpack_int4(quantize(weight, GGMLQuantizationType.Q4_1), "Q4_1", rows, cols)


def test_all_slices_4bit_pack_and_match_the_dequantized_product():
    q, kv = _int4(64, 96, 0), _int4(32, 96, 1)
    linear = Linear(96, [64, 32, 32], True, torch.float32, torch.device("cpu"))
    for shard, part in enumerate([q, kv, kv]):
        linear.load("weight", part, shard)
    bias = torch.randn(128)
    for shard, part in enumerate(bias.split([64, 32, 32])):
        linear.load("bias", part, shard)
    assert isinstance(linear.weight, PackedInt4Weight)
    assert "weight" not in dict(linear.named_parameters())
    x = torch.randn(5, 96)
    dense = torch.cat([q.dequantize(), kv.dequantize(), kv.dequantize()])
    expected = x @ dense.t() + bias
    torch.testing.assert_close(linear(x), expected, atol=1e-4, rtol=1e-4)
    # in bfloat16 (the fast path) within bfloat16's rounding
    bf16 = Linear(96, [64, 32, 32], False, torch.bfloat16, torch.device("cpu"))
    for shard, part in enumerate([q, kv, kv]):
        bf16.load("weight", part, shard)
    out = matmul(x.bfloat16(), bf16.weight)
    assert out.dtype == torch.bfloat16 and out.shape == (5, 128)
    torch.testing.assert_close(out.float(), x.bfloat16().float() @ dense.t(), atol=0.05, rtol=0.02)


def test_a_dense_slice_keeps_the_weight_dense():
    gate, up = _int4(64, 96, 2), torch.randn(64, 96)
    linear = Linear(96, [64, 64], False, torch.float32, torch.device("cpu"))
    linear.load("weight", gate, 0)
    linear.load("weight", up, 1)
    assert isinstance(linear.weight, torch.nn.Parameter)
    assert torch.equal(linear.weight[:64], gate.dequantize()) and torch.equal(linear.weight[64:], up)


def test_rows_the_kernel_cannot_pack_load_dequantized():
    weight = _int4(40, 96, 3)  # the kernel packs rows in multiples of 16
    linear = Linear(96, 40, False, torch.float32, torch.device("cpu"))
    linear.load("weight", weight)
    assert isinstance(linear.weight, torch.nn.Parameter) and torch.equal(linear.weight, weight.dequantize())


def test_bfloat16_scales_and_zeros_keep_each_groups_mean_weight():
    """The kernel's weights ``s' * (q - 8) + z'`` with bfloat16 scale and zero: per group, the mean
    error against the GGUF weights is the zero's rounding at most (the scale's rounding, shared by
    the group's 32 weights, does not shift its mean)."""
    from engine.checkpoint.gguf_int4 import GROUP_SIZE
    from engine.layers.int4_weight import scales_and_zeros

    part = _int4(64, 256, 2)
    pairs = scales_and_zeros(part.codes, part.scale, part.offset, torch.bfloat16).float()
    scale, zero = pairs[..., 0].t(), pairs[..., 1].t()  # [rows, groups]
    codes = part.codes.float().view(*part.scale.shape, GROUP_SIZE)
    exact = codes * part.scale[..., None] + part.offset[..., None]
    kernel = scale[..., None] * (codes - 8) + zero[..., None]
    half_ulp = zero.abs() * 2.0**-8  # bfloat16 keeps 8 significant bits: half an ulp <= 2^-8 |z|
    assert ((kernel - exact).mean(-1).abs() <= half_ulp + 1e-7).all()
    # the plain zero (offset + 8 * scale, rounded) leaves the scale's rounding in the mean
    plain = (part.offset + 8 * part.scale).to(torch.bfloat16).float()
    naive = scale[..., None] * (codes - 8) + plain[..., None]
    assert (naive - exact).mean(-1).abs().mean() > (kernel - exact).mean(-1).abs().mean()
