"""Which GGUF file a checkpoint path names, and reading its metadata (the ``gguf`` package, no torch).

A GGUF checkpoint is a ``.gguf`` file, or a directory that holds exactly one and no ``config.json``
(a directory with ``config.json`` is a Hugging Face checkpoint, whatever else it holds).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from engine.checkpoint.errors import CheckpointError

SUFFIX = ".gguf"


def find_gguf(path: str | Path) -> Path | None:
    """The GGUF file behind ``path``, or None when ``path`` is not a GGUF checkpoint."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix == SUFFIX else None
    if not path.is_dir() or (path / "config.json").exists():
        return None
    files = sorted(path.glob(f"*{SUFFIX}"))
    if len(files) > 1:
        names = ", ".join(f.name for f in files)
        raise CheckpointError(path, f"holds {len(files)} GGUF files ({names}); name one of them")
    return files[0] if files else None


def open_gguf(path: Path):
    """A ``gguf.GGUFReader`` (memory-mapped: tensors are read when touched), shared by the callers
    that read one file in turn (config, weights, inspection) while the file is unchanged."""
    stat = path.stat()
    try:
        return _reader(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    except Exception as exc:  # the reader raises ValueError, struct.error and friends on a bad file
        raise CheckpointError(path, f"cannot read GGUF file ({exc})") from exc


# Parsing the metadata of a 49,152-token vocabulary takes 2 s on one core.
@functools.lru_cache(maxsize=2)
def _reader(path: str, mtime_ns: int, size: int):  # noqa: ARG001 (the key: a changed file is reread)
    from gguf import GGUFReader

    return GGUFReader(path, "r")


def field(reader, key: str, default: Any = None) -> Any:
    """A metadata value as plain Python (str, int, float, bool or list), or ``default`` if absent."""
    found = reader.get_field(key)
    return default if found is None else found.contents()


def architecture(reader, path: Path) -> str:
    """The GGUF architecture name (``llama``, ``qwen2``...) that prefixes the model's keys."""
    arch = field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise CheckpointError(path, "no 'general.architecture' in the GGUF metadata")
    return arch


def require_checkpoint(path: str | Path) -> Path | None:
    """``find_gguf(path)``, after checking that ``path`` is a checkpoint at all (a GGUF file, or a
    directory with a config.json or one GGUF file); raises CheckpointError naming the problem."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "no such file or directory")
    gguf = find_gguf(path)
    if gguf is None and not (path / "config.json").is_file():
        raise CheckpointError(path, "is not a checkpoint (no config.json, no .gguf file)")
    return gguf
