"""What validating a checkpoint (a Hugging Face directory or a GGUF file) finds out; no torch: headers,
JSON and GGUF metadata only, plus a digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.gguf_file import find_gguf
from engine.checkpoint.inspect import inspect_checkpoint
from engine.checkpoint.model_facts import device_memory_bytes
from engine.checkpoint.weights import weight_files

DIGESTED_EXTRAS = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def content_digest(model_dir: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted({*files, *(model_dir / name for name in DIGESTED_EXTRAS)}):
        if path.is_file():
            digest.update(path.name.encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    return "sha256:" + digest.hexdigest()


def inspect(path: str) -> dict:
    """Facts to store on the Checkpoint row; raises CheckpointError saying what is wrong."""
    model_dir = Path(path)
    if not model_dir.is_absolute():
        raise CheckpointError(path, "path must be absolute")
    if not model_dir.exists():
        raise CheckpointError(path, "no such directory")
    if not model_dir.is_dir() and find_gguf(model_dir) is None:
        raise CheckpointError(path, "neither a directory nor a .gguf file")
    info = inspect_checkpoint(model_dir)
    facts = info.facts
    files = weight_files(model_dir)
    return {
        "architecture": info.architecture,
        "parameter_count": facts.total_parameters,
        "active_parameter_count": facts.active_parameters,
        "dtype": info.dtype,
        "size_bytes": info.size_bytes,
        "weight_bytes": facts.weight_bytes,
        "kv_bytes_per_token": facts.kv_bytes_per_token,
        "max_context": info.max_position_embeddings,
        "memory_per_replica_bytes": device_memory_bytes(
            facts.weight_bytes, 1, facts.kv_bytes_per_token, info.max_position_embeddings
        ),
        "digest": content_digest(model_dir, files),
        "details": info.to_dict(),
    }
