"""FP8 block-quantized weights in DeepSeek-V3's format, dequantized on load.

``config.json``'s ``quantization_config`` says ``quant_method: fp8`` and ``weight_block_size: [bo,
bi]``; each quantized ``<name>.weight`` is stored as float8_e4m3fn beside a float32
``<name>.weight_scale_inv`` of ``ceil(out / bo) x ceil(in / bi)`` blocks, and the weight is
``fp8 * scale_inv`` block by block. Loading dequantizes every such pair to float32 before the model
copies it in (and rounds it to its dtype), so every architecture reads these checkpoints. Running
the FP8 GEMM itself (Hopper) is a later step; this keeps memory at the model's dtype.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

SCALE_SUFFIX = "_scale_inv"


def fp8_block_size(raw: dict) -> tuple[int, int] | None:
    """The ``[out, in]`` block of an FP8 block-quantized checkpoint's config.json; None when the
    weights are not quantized. Raises ValueError on a quantization this engine cannot load."""
    quant = raw.get("quantization_config")
    if not quant:
        return None
    method = quant.get("quant_method")
    if method != "fp8":
        raise ValueError(f"quantization {method!r} is not supported (only DeepSeek-V3's block fp8)")
    block = quant.get("weight_block_size")
    if not isinstance(block, list) or len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
        raise ValueError(f"fp8 weight_block_size must be two positive integers, got {block!r}")
    return block[0], block[1]


def dequantize_block_fp8(weight, scale_inv, block: tuple[int, int]):
    """float32 ``weight * scale_inv`` with each scale spread over its ``block`` of the weight."""
    rows, cols = weight.shape
    expected = (-(-rows // block[0]), -(-cols // block[1]))
    if tuple(scale_inv.shape) != expected:
        raise ValueError(
            f"scale_inv of shape {tuple(scale_inv.shape)} does not give {block} blocks of a "
            f"{rows}x{cols} weight ({expected} expected)"
        )
    scale = scale_inv.float().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)
    return weight.float() * scale[:rows, :cols]


def dequantize_fp8_weights(
    weights: Iterable[tuple[str, object]], block: tuple[int, int]
) -> Iterator[tuple[str, object]]:
    """``weights`` with each fp8 weight and its ``_scale_inv`` replaced by the dequantized weight;
    the two may come in either order, from different files. Other tensors pass through."""
    import torch

    fp8_dtypes = (torch.float8_e4m3fn, torch.float8_e5m2)
    waiting_weights: dict[str, torch.Tensor] = {}
    waiting_scales: dict[str, torch.Tensor] = {}
    for name, tensor in weights:
        if name.endswith(SCALE_SUFFIX):
            target = name.removesuffix(SCALE_SUFFIX)
            if target in waiting_weights:
                yield target, _dequantized(target, waiting_weights.pop(target), tensor, block)
            else:
                waiting_scales[target] = tensor
        elif tensor.dtype in fp8_dtypes:
            if name in waiting_scales:
                yield name, _dequantized(name, tensor, waiting_scales.pop(name), block)
            else:
                waiting_weights[name] = tensor
        else:
            yield name, tensor
    unpaired = sorted(waiting_weights) + sorted(f"{n}{SCALE_SUFFIX}" for n in waiting_scales)
    if unpaired:
        raise ValueError(f"{len(unpaired)} fp8 tensors lack their pair, e.g. {', '.join(unpaired[:3])}")


def _dequantized(name: str, weight, scale_inv, block: tuple[int, int]):
    try:
        return dequantize_block_fp8(weight, scale_inv, block)
    except ValueError as exc:
        raise ValueError(f"tensor {name!r}: {exc}") from exc
