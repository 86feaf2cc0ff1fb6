"""FP8 block-quantized twins of a (tiny) checkpoint in DeepSeek-V3's format, for tests: every
projection weight becomes float8_e4m3fn plus a float32 ``weight_scale_inv`` per block (embeddings,
the LM head, routers and norms stay as they are, as in DeepSeek-V3's own checkpoint), and a
dequantized twin holds exactly the values the FP8 one stands for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FP8_MAX = 448.0  # largest finite float8_e4m3fn
QUANTIZED_SUFFIXES = ("_proj.weight", "_proj_with_mqa.weight")


def quantize_block_fp8(weight, block: tuple[int, int]):
    """(fp8 weight, float32 scale_inv of ceil(out/bo) x ceil(in/bi)): each block scaled so its
    largest magnitude maps to the largest fp8 value."""
    import torch
    import torch.nn.functional as F

    rows, cols = weight.shape
    bo, bi = block
    padded = F.pad(weight.float(), (0, -cols % bi, 0, -rows % bo))
    blocks = padded.view(padded.shape[0] // bo, bo, padded.shape[1] // bi, bi)
    scale_inv = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    spread = scale_inv.repeat_interleave(bo, 0).repeat_interleave(bi, 1)[:rows, :cols]
    return (weight.float() / spread).to(torch.float8_e4m3fn), scale_inv


def write_fp8_twins(
    src: str | Path,
    fp8_dir: str | Path,
    dequantized_dir: str | Path,
    block: tuple[int, int],
    dtype: str = "float32",
) -> None:
    """Write ``src``'s FP8 twin into ``fp8_dir`` and its dequantized twin into ``dequantized_dir``;
    ``dtype``: of the twin's weights, the FP8 one's unquantized tensors and both configs."""
    import torch
    from safetensors.torch import load_file, save_file

    from engine.checkpoint.fp8 import dequantize_block_fp8

    src = Path(src)
    tensors = load_file(str(src / "model.safetensors"))
    quantized, dequantized = {}, {}
    for name, tensor in tensors.items():
        if tensor.dim() == 2 and name.endswith(QUANTIZED_SUFFIXES):
            fp8, scale_inv = quantize_block_fp8(tensor, block)
            quantized[name], quantized[name + "_scale_inv"] = fp8, scale_inv
            dequantized[name] = dequantize_block_fp8(fp8, scale_inv, block).to(getattr(torch, dtype))
        else:
            quantized[name] = dequantized[name] = tensor.to(getattr(torch, dtype))
    for out, weights, quantization in (
        (Path(fp8_dir), quantized, {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": list(block)}),
        (Path(dequantized_dir), dequantized, None),
    ):
        shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.safetensors*"))
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
        config = json.loads((out / "config.json").read_text())
        config["dtype"] = dtype
        if quantization is not None:
            config["quantization_config"] = {**quantization, "activation_scheme": "dynamic"}
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
