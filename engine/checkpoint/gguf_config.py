"""A GGUF file's metadata as the ``config.json`` and ``generation_config.json`` a Hugging Face
checkpoint of the same model would have, so that the architecture's registered parser reads it."""

from __future__ import annotations

from pathlib import Path

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.gguf_file import architecture, field

# GGUF architecture -> the Hugging Face architecture the registry serves. llama.cpp writes Mistral
# checkpoints as "llama" (same tensors, same rotary layout).
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
# general.file_type -> the dtype the tensors hold; quantized types dequantize to float32.
FILE_TYPE_DTYPES = {0: "float32", 1: "float16", 32: "bfloat16"}


def configs_from_reader(reader, path: Path) -> tuple[dict, dict]:
    """(config.json, generation_config.json) equivalents of an open file (``gguf_file.open_gguf``);
    raises CheckpointError naming what is wrong."""
    arch = architecture(reader, path)
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            path, f"unsupported GGUF architecture {arch!r}; supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    tensor_names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in tensor_names:
        raise CheckpointError(path, "per-dimension RoPE frequency factors (rope_freqs) are not supported")

    def key(name: str, default=None):
        value = field(reader, f"{arch}.{name}", default)
        if value is None:
            raise CheckpointError(path, f"no '{arch}.{name}' in the GGUF metadata")
        if isinstance(value, list):
            raise CheckpointError(path, f"'{arch}.{name}' varies per layer, which is not supported")
        return value

    tokens = field(reader, "tokenizer.ggml.tokens")
    stop_ids = (field(reader, f"tokenizer.ggml.{name}_token_id") for name in ("eos", "eot"))
    eos_ids = [i for i in stop_ids if i is not None]
    config = {
        "architectures": [ARCHITECTURES[arch]],
        "vocab_size": len(tokens) if tokens else key("vocab_size"),
        "hidden_size": key("embedding_length"),
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": key("attention.head_count"),
        "num_key_value_heads": key("attention.head_count_kv", field(reader, f"{arch}.attention.head_count")),
        "head_dim": field(reader, f"{arch}.attention.key_length"),
        "max_position_embeddings": key("context_length"),
        "rms_norm_eps": _shortest(key("attention.layer_norm_rms_epsilon")),
        "rope_theta": _shortest(key("rope.freq_base", 10000.0)),
        "rope_scaling": _rope_scaling(reader, arch, path),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "attention_bias": "blk.0.attn_q.bias" in tensor_names,
        "dtype": FILE_TYPE_DTYPES.get(field(reader, "general.file_type", 0), "float32"),
        "eos_token_id": eos_ids,
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
    }
    generation = {"eos_token_id": eos_ids, "bos_token_id": config["bos_token_id"]}
    return config, generation


def _rope_scaling(reader, arch: str, path: Path) -> dict | None:
    kind = field(reader, f"{arch}.rope.scaling.type", "none")
    if kind == "none":
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(field(reader, f"{arch}.rope.scaling.factor", 1.0))}
    raise CheckpointError(path, f"RoPE scaling {kind!r} is not supported (only linear)")


def _shortest(value: float) -> float:
    """A float32 metadata value as the shortest decimal that reads back to it (1e-05, not 9.99...e-06)."""
    import numpy as np

    return float(str(np.float32(value)))
