"""What is derived from a GGUF file's header, kept on disk so that later processes skip deriving it.

Parsing a GGUF header builds every metadata field, the vocabulary's strings included (5 s for
SmolLM2's 49,152 tokens on one core), yet the engine needs only a few facts and the tensor table.
Each derived part (``metadata``, ``tokenizer``) is a directory under
``<cache dir>/gguf/<sha256 of the file's resolved path, size and mtime>/``, so a changed file gets a
new entry. A part is written into a temporary directory and renamed into place: replicas starting
together never read half of one. A part that cannot be read is removed and derived again; a cache
that cannot be written is skipped. ``CHASSIS_CACHE_DIR=off`` turns it off (``engine/env.py``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from engine import env

log = logging.getLogger(__name__)

# Part of the key: a change to what a part holds, or how it is written, starts new entries.
FORMAT = 1
T = TypeVar("T")


def entry_dir(gguf_path: Path) -> Path | None:
    """The directory of ``gguf_path``'s entry as the file is now; None when the cache is off."""
    root = env.cache_dir()
    if root is None:
        return None
    stat = gguf_path.stat()
    key = f"{FORMAT}\0{gguf_path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
    return root / "gguf" / hashlib.sha256(key.encode()).hexdigest()


def cached(
    gguf_path: Path,
    part: str,
    derive: Callable[[], T],
    save: Callable[[T, Path], None],
    load: Callable[[Path], T],
) -> T:
    """``part`` of ``gguf_path``'s entry, read with ``load``; when absent or unreadable, ``derive``d
    and written with ``save`` (into an empty directory) for the next process."""
    entry = entry_dir(gguf_path)
    if entry is None:
        return derive()
    part_dir = entry / part
    if part_dir.is_dir():
        try:
            return load(part_dir)
        except Exception as exc:  # anything a damaged file makes a loader raise: derive it again
            log.warning("discarding unreadable cache entry %s (%s)", part_dir, exc)
            _discard(part_dir)
    value = derive()
    try:
        _publish(part_dir, lambda tmp: save(value, tmp))
    except Exception as exc:  # a read-only or full disk costs the next process time, nothing else
        log.warning("cannot write cache entry %s (%s)", part_dir, exc)
    return value


def _publish(part_dir: Path, write: Callable[[Path], None]) -> None:
    part_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{part_dir.name}-", dir=part_dir.parent))
    try:
        write(tmp)
        os.rename(tmp, part_dir)
    except OSError:
        if not part_dir.is_dir():
            raise
        # Another process published the same part first: its copy is as good as ours.
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _discard(part_dir: Path) -> None:
    """Move the part aside before deleting it, so no process reads it half-deleted."""
    doomed = Path(tempfile.mkdtemp(prefix=f".{part_dir.name}-discarded-", dir=part_dir.parent))
    try:
        os.rename(part_dir, doomed / part_dir.name)
    except OSError:
        pass  # already discarded (or replaced) by another process
    shutil.rmtree(doomed, ignore_errors=True)
