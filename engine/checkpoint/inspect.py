"""Cheap facts about a checkpoint for validation before anything is launched (no weights loaded)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import prod
from pathlib import Path

from engine.checkpoint.gguf_file import find_gguf
from engine.checkpoint.gguf_metadata import gguf_metadata
from engine.checkpoint.model_config import load_model_config
from engine.checkpoint.model_facts import ModelFacts, model_facts
from engine.checkpoint.weights import tensor_shapes, weight_files


@dataclass
class CheckpointInfo:
    architecture: str
    num_parameters: int  # of the tensors the weight files hold
    dtype: str
    size_bytes: int  # weight files (safetensors or GGUF) on disk
    facts: ModelFacts  # what its config says serving it costs: parameters, active ones, bytes
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    num_weight_files: int
    has_tokenizer: bool
    has_chat_template: bool

    @property
    def kv_bytes_per_token(self) -> int:
        """Every layer's KV spec summed, at the checkpoint's dtype, on one device."""
        return self.facts.kv_bytes_per_token

    def to_dict(self) -> dict:
        return asdict(self)


def inspect_checkpoint(model_dir: str | Path) -> CheckpointInfo:
    """Raises CheckpointError (naming the file) when the directory cannot be served."""
    model_dir = Path(model_dir)
    cfg = load_model_config(model_dir)
    files = weight_files(model_dir)
    shapes = tensor_shapes(model_dir)
    has_tokenizer, has_template = _tokenizer_facts(model_dir)
    return CheckpointInfo(
        architecture=cfg.architecture,
        num_parameters=sum(prod(shape) for shape, _ in shapes.values()),
        dtype=cfg.dtype,
        size_bytes=sum(p.stat().st_size for p in files),
        facts=model_facts(cfg),
        num_layers=cfg.num_layers,
        hidden_size=cfg.hidden_size,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        vocab_size=cfg.vocab_size,
        max_position_embeddings=cfg.max_position_embeddings,
        num_weight_files=len(files),
        has_tokenizer=has_tokenizer,
        has_chat_template=has_template,
    )


def _tokenizer_facts(model_dir: Path) -> tuple[bool, bool]:
    """(has a tokenizer, has a chat template): files of a Hugging Face directory, or GGUF metadata."""
    gguf_path = find_gguf(model_dir)
    if gguf_path is not None:
        metadata = gguf_metadata(gguf_path)
        return metadata.has_tokenizer, metadata.has_chat_template
    tokenizer_config = model_dir / "tokenizer_config.json"
    has_template = (model_dir / "chat_template.jinja").is_file() or (
        tokenizer_config.is_file() and '"chat_template"' in tokenizer_config.read_text(encoding="utf-8")
    )
    return (model_dir / "tokenizer.json").is_file(), has_template
