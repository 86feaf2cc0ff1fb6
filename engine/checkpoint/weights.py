"""Locating and reading weights: safetensors, single-file or sharded through the index, or a GGUF file
(``engine.checkpoint.gguf_weights``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.gguf_file import find_gguf
from engine.checkpoint.gguf_weights import gguf_tensor_shapes, iter_gguf_weights
from engine.checkpoint.model_config import read_json

INDEX_NAME = "model.safetensors.index.json"


def weight_files(model_dir: str | Path) -> list[Path]:
    gguf_path = find_gguf(model_dir)
    if gguf_path is not None:
        return [gguf_path]
    model_dir = Path(model_dir)
    index_path = model_dir / INDEX_NAME
    if index_path.exists():
        index = read_json(index_path)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(index_path, "no 'weight_map' object")
        files = []
        for shard in dict.fromkeys(weight_map.values()):
            path = model_dir / str(shard)
            if not path.is_file():
                raise CheckpointError(index_path, f"lists shard {shard!r}, which is missing")
            files.append(path)
        return files
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(model_dir, "no *.safetensors weights (and no model.safetensors.index.json)")
    return files


def iter_weights(model_dir: str | Path, keep_int4: bool = False) -> Iterator[tuple[str, object]]:
    """(name, torch tensor) for every tensor of every weight file, one file open at a time;
    ``keep_int4``: a GGUF file's 4-bit projection weights as ``GroupInt4`` (``iter_gguf_weights``)."""
    gguf_path = find_gguf(model_dir)
    if gguf_path is not None:
        yield from iter_gguf_weights(gguf_path, keep_int4)
        return
    from safetensors import safe_open

    for path in weight_files(model_dir):
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
        except CheckpointError:
            raise
        except Exception as exc:  # safetensors raises its own error types for corrupt headers
            raise CheckpointError(path, f"cannot read safetensors file ({exc})") from exc


def tensor_shapes(model_dir: str | Path) -> dict[str, tuple[list[int], str]]:
    """name -> (shape, safetensors dtype or GGML type) from the file headers only; no tensor data is read."""
    gguf_path = find_gguf(model_dir)
    if gguf_path is not None:
        return gguf_tensor_shapes(gguf_path)
    from safetensors import safe_open

    shapes = {}
    for path in weight_files(model_dir):
        try:
            with safe_open(str(path), framework="numpy") as f:
                for name in f.keys():
                    sl = f.get_slice(name)
                    shapes[name] = (list(sl.get_shape()), str(sl.get_dtype()))
        except Exception as exc:
            raise CheckpointError(path, f"cannot read safetensors header ({exc})") from exc
    return shapes
