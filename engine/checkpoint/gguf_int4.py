"""A GGUF ``Q4_0`` or ``Q4_1`` tensor kept 4-bit: its codes and per-group scale and offset.

Both formats quantize each row in groups of 32 inputs, one 4-bit code ``q`` (0-15) per weight:
``Q4_1`` stores an fp16 scale ``d`` and minimum ``m`` per group (``w = d * q + m``), ``Q4_0`` a scale
only (``w = d * (q - 8)``). ``GroupInt4`` holds them as ``w = scale * q + offset`` (``offset = -8 * d``
for ``Q4_0``), in float32, so ``dequantize`` gives the bits ``gguf.quants.dequantize`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

GROUP_SIZE = 32
# Bytes per group of 32 weights: fp16 scale (and fp16 minimum), then 16 bytes of two codes each.
_BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20}
INT4_TYPES = frozenset(_BLOCK_BYTES)


@dataclass(frozen=True)
class GroupInt4:
    codes: torch.Tensor  # uint8 [rows, cols], 0-15
    scale: torch.Tensor  # float32 [rows, cols / 32]
    offset: torch.Tensor  # float32 [rows, cols / 32]

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    def dim(self) -> int:
        return self.codes.dim()

    def dequantize(self) -> torch.Tensor:
        """The float32 weight, ``scale * q + offset`` per group."""
        rows, cols = self.codes.shape
        groups = self.codes.view(rows, cols // GROUP_SIZE, GROUP_SIZE).float()
        return (groups * self.scale.unsqueeze(-1) + self.offset.unsqueeze(-1)).view(rows, cols)

    def map_rows(self, fn) -> GroupInt4:
        """The same rows rearranged by ``fn`` (applied alike to codes, scales and offsets)."""
        return GroupInt4(fn(self.codes), fn(self.scale), fn(self.offset))

    def narrow(self, dim: int, start: int, length: int) -> GroupInt4 | torch.Tensor:
        """Rows ``start:start + length`` (dim 0), or columns (dim 1); a column range that splits a
        group comes back dequantized."""
        if dim == 0:
            return self.map_rows(lambda t: t.narrow(0, start, length))
        if start % GROUP_SIZE or length % GROUP_SIZE:
            return self.dequantize().narrow(dim, start, length)
        first, groups = start // GROUP_SIZE, length // GROUP_SIZE
        return GroupInt4(
            self.codes.narrow(1, start, length),
            self.scale.narrow(1, first, groups),
            self.offset.narrow(1, first, groups),
        )


def unpack_int4(raw: np.ndarray, type_name: str, rows: int, cols: int) -> GroupInt4:
    """``raw``: the tensor's bytes (``rows`` rows of ``cols / 32`` blocks) as the file stores them."""
    blocks = np.ascontiguousarray(raw).reshape(rows, cols // GROUP_SIZE, _BLOCK_BYTES[type_name])
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if type_name == "Q4_1":
        offset = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        packed = blocks[..., 4:]
    else:
        offset = d * np.float32(-8.0)
        packed = blocks[..., 2:]
    # Byte j holds code j in its low nibble and code j + 16 in its high one.
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).reshape(rows, cols)
    return GroupInt4(torch.from_numpy(codes), torch.from_numpy(d), torch.from_numpy(offset))
