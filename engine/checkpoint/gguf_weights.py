"""A GGUF file's tensors under the Hugging Face names the engine's loader takes, dequantized.

llama.cpp's converter permutes the rows of a Llama ``attn_q``/``attn_k`` weight so that its rotary
kernel rotates adjacent pairs; the engine (like transformers) rotates the two halves of each head,
so those rows are permuted back here (as transformers' GGUF loader does). Qwen files keep the
Hugging Face layout: llama.cpp rotates them NeoX-style.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.gguf_metadata import GGUFTensor, gguf_metadata

GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
PERMUTED_ROTARY_ARCHS = frozenset({"llama"})
ROTARY_PERMUTED = ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias")
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_GLOBAL_RE = re.compile(r"(\w+)\.(weight|bias)")


def hf_name(gguf_name: str) -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``; None if not a known tensor."""
    if m := _BLOCK_RE.fullmatch(gguf_name):
        block, part, kind = m.groups()
        return f"model.layers.{block}.{BLOCK_NAMES[part]}.{kind}" if part in BLOCK_NAMES else None
    if m := _GLOBAL_RE.fullmatch(gguf_name):
        part, kind = m.groups()
        return f"{GLOBAL_NAMES[part]}.{kind}" if part in GLOBAL_NAMES else None
    return None


# The projections whose Q4_0/Q4_1 weights ``keep_int4`` hands on 4-bit (every one a ``Linear``).
INT4_PROJECTIONS = frozenset({"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})


def iter_gguf_weights(path: Path, keep_int4: bool = False) -> Iterator[tuple[str, object]]:
    """(HF name, float32 torch tensor) for every tensor of the file, one tensor in memory at a time;
    with ``keep_int4`` a projection's Q4_0/Q4_1 weight comes as a ``GroupInt4`` instead."""
    import numpy as np
    import torch
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    from engine.checkpoint.gguf_int4 import INT4_TYPES, unpack_int4

    metadata = gguf_metadata(path)
    heads = metadata.config["num_attention_heads"]
    kv_heads = metadata.config["num_key_value_heads"]
    blob = np.memmap(path, mode="r")  # pages are read as each tensor is dequantized
    for tensor in metadata.tensors:
        name = _hf_name_or_raise(path, tensor.name)
        qtype = GGMLQuantizationType(tensor.ggml_type)
        permuted = metadata.architecture in PERMUTED_ROTARY_ARCHS and name.endswith(ROTARY_PERMUTED)
        unpermute = partial(unpermute_rotary_rows, num_heads=heads if "q_proj" in name else kv_heads)
        if keep_int4 and qtype.name in INT4_TYPES and _is_projection(tensor.name):
            weight = unpack_int4(_raw_data(blob, tensor, qtype), qtype.name, *tensor.shape)
            yield name, weight.map_rows(unpermute) if permuted else weight
            continue
        try:
            array = dequantize(_raw_data(blob, tensor, qtype), qtype)
        except NotImplementedError as exc:
            raise CheckpointError(path, f"tensor {tensor.name!r}: cannot dequantize ({exc})") from exc
        if permuted:
            array = unpermute(array)
        yield name, torch.from_numpy(np.array(array, dtype=np.float32))  # a copy: the file is read-only


def _is_projection(gguf_name: str) -> bool:
    m = _BLOCK_RE.fullmatch(gguf_name)
    return m is not None and m.group(2) in INT4_PROJECTIONS and m.group(3) == "weight"


def _raw_data(blob, tensor: GGUFTensor, qtype):
    """A tensor's bytes, shaped as ``gguf.quants.dequantize`` takes them (rows of blocks)."""
    from gguf.quants import quant_shape_to_byte_shape

    byte_shape = quant_shape_to_byte_shape(tensor.shape, qtype)
    return blob[tensor.offset : tensor.offset + tensor.nbytes].reshape(byte_shape)


def unpermute_rotary_rows(weight, num_heads: int):
    """Undo llama.cpp's ``permute``: per head, rows (pair, 2) -> (2, pair)."""
    half = weight.shape[0] // num_heads // 2
    return weight.reshape(num_heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_tensor_shapes(path: Path) -> dict[str, tuple[list[int], str]]:
    """HF name -> (shape, GGML type name) from the file's tensor infos; no tensor data is read."""
    from gguf.constants import GGMLQuantizationType

    return {
        _hf_name_or_raise(path, t.name): (list(t.shape), GGMLQuantizationType(t.ggml_type).name)
        for t in gguf_metadata(path).tensors
    }


def _hf_name_or_raise(path: Path, gguf_name: str) -> str:
    name = hf_name(gguf_name)
    if name is None:
        raise CheckpointError(path, f"unexpected tensor {gguf_name!r} (not a Llama-family decoder tensor)")
    return name
