"""All the engine reads from a GGUF file's header: the config equivalents, the tensor table and the
tokenizer facts, derived from one parse and kept in the cache (``gguf_cache``) for later processes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.gguf_cache import cached
from engine.checkpoint.gguf_config import configs_from_reader
from engine.checkpoint.gguf_file import architecture, field, open_gguf

FILE_NAME = "metadata.json"


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    ggml_type: int  # a gguf.GGMLQuantizationType value
    shape: tuple[int, ...]  # rows first, as numpy and torch order it
    offset: int  # of its data, from the start of the file
    nbytes: int


@dataclass(frozen=True)
class GGUFMetadata:
    architecture: str  # the GGUF name: llama, qwen2...
    config: dict  # config.json's equivalent
    generation_config: dict
    tensors: tuple[GGUFTensor, ...]
    has_tokenizer: bool
    has_chat_template: bool


def gguf_metadata(path: Path) -> GGUFMetadata:
    return cached(path, "metadata", lambda: _derive(path), _save, _load)


def gguf_configs(path: Path) -> tuple[dict, dict]:
    """(config.json, generation_config.json) equivalents; raises CheckpointError naming what is wrong."""
    metadata = gguf_metadata(path)
    return metadata.config, metadata.generation_config


def _derive(path: Path) -> GGUFMetadata:
    reader = open_gguf(path)
    if reader.byte_order != "I":  # the cached tensor table is read as the host's byte order
        raise CheckpointError(path, "GGUF files of the other byte order are not supported")
    config, generation_config = configs_from_reader(reader, path)
    tensors = tuple(
        GGUFTensor(
            t.name, int(t.tensor_type), tuple(int(d) for d in reversed(t.shape)), t.data_offset, t.n_bytes
        )
        for t in reader.tensors
    )
    return GGUFMetadata(
        architecture(reader, path),
        config,
        generation_config,
        tensors,
        has_tokenizer=field(reader, "tokenizer.ggml.model") is not None,
        has_chat_template=bool(field(reader, "tokenizer.chat_template")),
    )


def _save(metadata: GGUFMetadata, directory: Path) -> None:
    (directory / FILE_NAME).write_text(json.dumps(asdict(metadata)), encoding="utf-8")


def _load(directory: Path) -> GGUFMetadata:
    raw = json.loads((directory / FILE_NAME).read_text(encoding="utf-8"))
    tensors = tuple(GGUFTensor(**{**t, "shape": tuple(t["shape"])}) for t in raw.pop("tensors"))
    return GGUFMetadata(**raw, tensors=tensors)
