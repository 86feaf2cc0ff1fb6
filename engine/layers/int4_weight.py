"""A projection weight kept 4-bit on a CPU (``EngineConfig.gguf_weights`` int4): a GGUF file's
Q4_0/Q4_1 codes packed for torch's int4 CPU kernel (``aten._weight_int4pack_mm_for_cpu``).

That kernel dequantizes groups of 32 inputs as ``scale * (q - 8) + zero`` with the scales and zeros
in the activations' dtype; a GGUF group's ``scale * q + offset`` is the same weight with
``zero = offset + 8 * scale``. Its fast path is bfloat16 activations: on a 2-core EPYC (AVX-512 BF16)
SmolLM2-135M's one-row products took 19-54 µs against 93-321 µs for the same weights in fp32
(column-major MKL GEMV), the 4-bit codes being an eighth of the bytes. float32 activations run a
slower generic path.

It stands where a ``Linear`` keeps its ``weight`` (``matmul`` dispatches on it), so it answers the
few questions callers ask of a weight: ``shape``, ``dtype`` and ``device``.
"""

from __future__ import annotations

import torch

from engine.checkpoint.gguf_int4 import GROUP_SIZE, GroupInt4

# The kernel's packing takes output rows in multiples of this.
ROW_MULTIPLE = 16


def packable(rows: int, cols: int, device: torch.device) -> bool:
    return device.type == "cpu" and rows % ROW_MULTIPLE == 0 and cols % GROUP_SIZE == 0


def scales_and_zeros(
    codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """The kernel's [groups, rows, 2] scales and zeros in ``dtype``. Rounded to bfloat16, a scale's
    error multiplies ``q - 8`` for all 32 weights of its group at once: an error that does not
    average out over a dot product the way independent roundings of dense weights do. So the zero
    is taken for the rounded scale, ``offset + 8 * s' + (s - s') * mean(q)``, which leaves each
    group's mean weight exact up to the rounding of the zero itself. On a Sapphire Rapids core,
    bfloat16 SmolLM2-135M answered the capital of France with "L'Étoile, la Marseillaise" with the
    plain zero ``offset + 8 * s`` and with "Paris" with this one."""
    rounded = scale.to(dtype).float()
    mean_code = codes.float().view(*scale.shape, GROUP_SIZE).mean(-1)
    zero = offset + 8.0 * rounded + (scale - rounded) * mean_code
    return torch.stack([rounded.t(), zero.t()], dim=-1).to(dtype).contiguous()


class PackedInt4Weight:
    def __init__(self, parts: list[GroupInt4], dtype: torch.dtype) -> None:
        """``parts``: the stacked outputs' weights (fused q/k/v, gate/up) in order; ``dtype``: the
        activations' (and the scales')."""
        codes = torch.cat([p.codes for p in parts])
        scale = torch.cat([p.scale for p in parts])
        offset = torch.cat([p.offset for p in parts])
        self.shape = codes.shape
        self.dtype = dtype
        self.device = codes.device
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)
        self.scales_and_zeros = scales_and_zeros(codes, scale, offset, dtype)

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T (+ bias)`` over the last dimension, in ``x``'s dtype."""
        flat = x.reshape(-1, self.shape[1])
        if flat.dtype != self.dtype or not flat.is_contiguous():
            flat = flat.to(self.dtype).contiguous()
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP_SIZE, self.scales_and_zeros)
        if bias is not None:
            out = out + bias
        return out.to(x.dtype).view(*x.shape[:-1], self.shape[0])
