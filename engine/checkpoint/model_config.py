"""The architecture facts the engine needs: ``config.json`` (or a GGUF file's metadata, translated)
parsed by its architecture's registered parser (``engine.models.registry``), plus generation_config."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.fp8 import fp8_block_size
from engine.checkpoint.gguf_file import find_gguf
from engine.checkpoint.gguf_metadata import gguf_configs
from engine.checkpoint.mla_config import MLAConfig
from engine.checkpoint.moe_config import MoEConfig
from engine.models import registry

CHECKPOINT_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None  # None for plain RoPE; else the HF dict incl. "rope_type"
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    sliding_windows: list[int | None]  # per layer
    dtype: str  # the checkpoint's declared dtype
    eos_token_ids: list[int] = field(default_factory=list)
    bos_token_id: int | None = None
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    moe: MoEConfig | None = None  # mixture-of-experts MLPs (engine.checkpoint.moe_config)
    mla: MLAConfig | None = None  # multi-head latent attention (engine.checkpoint.mla_config)
    # Multi-token-prediction layers stored after the decoder layers (DeepSeek-V3): loaded and kept
    # for speculative decoding, not run.
    num_mtp_layers: int = 0
    # [out, in] blocks of FP8 block-quantized weights (engine.checkpoint.fp8); None: not quantized.
    fp8_block_size: tuple[int, int] | None = None
    # The gated MLP's activation: "silu" (SwiGLU) or "gelu_pytorch_tanh" (Gemma's GeGLU).
    hidden_act: str = "silu"
    # Options of the Gemma family (engine.models.gemma2, gemma3); the defaults are the Llama family's.
    attention_scale: float | None = None  # the softmax scale; None: head_dim ** -0.5
    attn_logit_softcap: float | None = None  # attention scores become cap * tanh(score / cap)
    final_logit_softcap: float | None = None  # and so do the LM head's logits
    embedding_multiplier: float | None = None  # the token embeddings times this (Gemma: sqrt(hidden))
    norm_weight_offset: float = 0.0  # RMSNorm scales by offset + weight (Gemma stores weight - 1)
    sandwich_norms: bool = False  # RMSNorms after attention and around the MLP as well (four a layer)
    # RoPE base of the sliding-window layers, unscaled (Gemma-3's rope_local_base_freq); None: the
    # global rope_theta and rope_scaling on every layer.
    local_rope_theta: float | None = None


def read_json(path: Path, required: bool = True) -> dict | None:
    if not path.is_file():
        if required:
            raise CheckpointError(path, "file is missing")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(path, f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CheckpointError(path, "expected a JSON object at the top level")
    return data


def load_model_config(model_dir: str | Path) -> ModelConfig:
    """``model_dir``: a Hugging Face directory, or a GGUF checkpoint (``engine.checkpoint.gguf_file``)."""
    model_dir = Path(model_dir)
    gguf_path = find_gguf(model_dir)
    if gguf_path is not None:
        path = gguf_path
        raw, gen = gguf_configs(gguf_path)
    elif not model_dir.is_dir():
        raise CheckpointError(model_dir, "not a directory")
    else:
        path = model_dir / "config.json"
        raw = read_json(path)
        gen = read_json(model_dir / "generation_config.json", required=False) or {}
    cfg = parse_model_config(raw, path)
    cfg.eos_token_ids = _eos_ids(raw.get("eos_token_id"), gen.get("eos_token_id"))
    cfg.bos_token_id = gen.get("bos_token_id", raw.get("bos_token_id"))
    cfg.generation_defaults = {
        k: gen[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty") if k in gen
    }
    return cfg


def parse_model_config(raw: dict, path: str | Path = "config.json") -> ModelConfig:
    """A config.json's contents, parsed by its architecture's registered parser; ``path`` names the
    file in a CheckpointError."""
    archs = raw.get("architectures") or []
    if not isinstance(archs, list) or not archs:
        raise CheckpointError(path, "no 'architectures' entry")
    arch = archs[0]
    registered = registry.get_architecture(arch)
    if registered is None:
        supported = ", ".join(registry.supported_architectures())
        raise CheckpointError(path, f"unsupported architecture {arch!r}; supported: {supported}")
    try:
        cfg = registered.parse_config(raw, arch)
        cfg.fp8_block_size = fp8_block_size(raw)
        return cfg
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(path, f"missing or malformed field: {exc}") from exc


def checkpoint_dtype(raw: dict) -> str:
    dtype = str(raw.get("dtype") or raw.get("torch_dtype") or "float32").removeprefix("torch.")
    if dtype not in CHECKPOINT_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(CHECKPOINT_DTYPES)}")
    return dtype


def _eos_ids(*values: object) -> list[int]:
    ids: list[int] = []
    for value in values:
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    return ids


def positive_int(raw: dict, key: str) -> int:
    value = raw[key]
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value
