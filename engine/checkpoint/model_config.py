"""The architecture facts the engine needs, parsed from ``config.json`` (and generation_config)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.checkpoint.errors import CheckpointError

# architecture -> per-architecture flags of the one generic decoder
ARCHITECTURES: dict[str, dict[str, bool]] = {
    "LlamaForCausalLM": {"qkv_bias": False, "qk_norm": False},
    "MistralForCausalLM": {"qkv_bias": False, "qk_norm": False},
    "Qwen2ForCausalLM": {"qkv_bias": True, "qk_norm": False},
    "Qwen3ForCausalLM": {"qkv_bias": False, "qk_norm": True},
}
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

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer, at the checkpoint's dtype."""
        itemsize = 4 if self.dtype == "float32" else 2
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * itemsize


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
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(model_dir, "not a directory")
    path = model_dir / "config.json"
    raw = read_json(path)
    archs = raw.get("architectures") or []
    if not isinstance(archs, list) or not archs:
        raise CheckpointError(path, "no 'architectures' entry")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            path, f"unsupported architecture {arch!r}; supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    try:
        cfg = _parse(raw, arch)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(path, f"missing or malformed field: {exc}") from exc
    gen = read_json(model_dir / "generation_config.json", required=False) or {}
    cfg.eos_token_ids = _eos_ids(raw.get("eos_token_id"), gen.get("eos_token_id"))
    cfg.bos_token_id = gen.get("bos_token_id", raw.get("bos_token_id"))
    cfg.generation_defaults = {
        k: gen[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty") if k in gen
    }
    return cfg


def _parse(raw: dict, arch: str) -> ModelConfig:
    num_heads = _positive(raw, "num_attention_heads")
    hidden = _positive(raw, "hidden_size")
    head_dim = raw.get("head_dim") or hidden // num_heads
    num_kv = raw.get("num_key_value_heads") or num_heads
    if num_heads % num_kv:
        raise ValueError(f"num_attention_heads={num_heads} is not a multiple of num_key_value_heads={num_kv}")
    num_layers = _positive(raw, "num_hidden_layers")
    rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    rope_theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "llama3", "linear"):
        raise ValueError(f"rope_type {rope_type!r} is not supported (default, linear, llama3)")
    rope_scaling = None if rope_type == "default" else dict(rope, rope_type=rope_type)
    dtype = str(raw.get("dtype") or raw.get("torch_dtype") or "float32").removeprefix("torch.")
    if dtype not in CHECKPOINT_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(CHECKPOINT_DTYPES)}")
    return ModelConfig(
        architecture=arch,
        vocab_size=_positive(raw, "vocab_size"),
        hidden_size=hidden,
        intermediate_size=_positive(raw, "intermediate_size"),
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv,
        head_dim=int(head_dim),
        max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=ARCHITECTURES[arch]["qkv_bias"] or bool(raw.get("attention_bias", False)),
        qk_norm=ARCHITECTURES[arch]["qk_norm"],
        sliding_windows=_sliding_windows(raw, num_layers),
        dtype=dtype,
    )


def _sliding_windows(raw: dict, num_layers: int) -> list[int | None]:
    window = raw.get("sliding_window")
    layer_types = raw.get("layer_types")
    if layer_types:  # Qwen2/3 and newer configs say per layer
        if len(layer_types) != num_layers:
            raise ValueError(f"layer_types has {len(layer_types)} entries for {num_layers} layers")
        return [window if t == "sliding_attention" and window else None for t in layer_types]
    if raw.get("use_sliding_window") is False:
        return [None] * num_layers
    return [int(window) if window else None] * num_layers


def _eos_ids(*values: object) -> list[int]:
    ids: list[int] = []
    for value in values:
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    return ids


def _positive(raw: dict, key: str) -> int:
    value = raw[key]
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value
