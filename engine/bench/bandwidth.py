"""The machine's ceilings for moving KV: pinned host-to-device copies and uncached disk reads.

Both are measured, never assumed, so a tier's onload is judged against this machine in this run.
The disk is read with ``O_DIRECT`` (page-aligned buffers) where the filesystem allows it (tmpfs
and some overlay filesystems refuse it); otherwise after ``posix_fadvise(DONTNEED)`` drops the
file's cached pages, and the report names the method.
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

MIB = 1 << 20
CHUNK = 16 * MIB  # one read or write call
PROBE_NAME = ".read-bandwidth-probe"  # at the tier's root: the disk tier only indexes its subfolders


@dataclass
class Bandwidth:
    gb_per_s: float  # 1e9 bytes per second, best of the passes
    nbytes: int
    method: str


def host_to_device(device: torch.device, nbytes: int, passes: int = 5) -> Bandwidth:
    """Best of ``passes`` copies of one pinned ``nbytes`` buffer to the device, timed by events.
    Without an accelerator: a plain memory copy (what "onload" is on the CPU)."""
    if device.type != "cuda":
        src, dst = torch.empty(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8)
        best = float("inf")
        for _ in range(passes):
            started = time.perf_counter()
            dst.copy_(src)
            best = min(best, time.perf_counter() - started)
        return Bandwidth(nbytes / best / 1e9, nbytes, "host memcpy (no accelerator)")
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst.copy_(src, non_blocking=True)  # first touch of both buffers, outside the timing
    torch.cuda.synchronize(device)
    best = float("inf")
    for _ in range(passes):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return Bandwidth(nbytes / best / 1e9, nbytes, "pinned host tensor .to(device, non_blocking), CUDA events")


def disk_read(directory: str | Path, nbytes: int, passes: int = 2) -> Bandwidth:
    """Best of ``passes`` sequential reads of an ``nbytes`` file written (and synced) in
    ``directory``, bypassing the page cache; the file is deleted afterwards."""
    path = Path(directory) / PROBE_NAME
    size = min(CHUNK, max(MIB, nbytes)) // MIB * MIB  # one read call, a multiple of any alignment
    nbytes = max(size, nbytes // size * size)
    chunk = os.urandom(size)  # incompressible, for filesystems that compress
    try:
        with open(path, "wb") as f:
            for _ in range(nbytes // size):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
        try:
            best, method = _best(lambda: _read_direct(path, buf), passes), "O_DIRECT"
        except OSError as e:
            problems: list[str] = []
            best = _best(lambda: _read_after_dropping_cache(path, buf, problems), passes)
            method = f"posix_fadvise DONTNEED then read (O_DIRECT refused: {e.strerror or e})"
            if problems:
                method += f"; the cache may have served it: {problems[0]}"
        return Bandwidth(nbytes / best / 1e9, nbytes, method)
    finally:
        path.unlink(missing_ok=True)


def drop_page_cache(paths) -> str | None:
    """Sync each file and ask the kernel to drop its cached pages; None when done for every file,
    else why not (the reads that follow may then come from memory)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except (OSError, AttributeError) as e:
            return f"posix_fadvise DONTNEED failed on {path}: {e}"
        finally:
            os.close(fd)
    return None


def _best(read_once, passes: int) -> float:
    best = float("inf")
    for _ in range(passes):
        started = time.perf_counter()
        read_once()
        best = min(best, time.perf_counter() - started)
    return best


def _read_direct(path: Path, buf: mmap.mmap) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    try:
        if not hasattr(os, "O_DIRECT"):
            raise OSError(0, "no O_DIRECT on this platform")
        while os.readv(fd, [buf]) > 0:
            pass
    finally:
        os.close(fd)


def _read_after_dropping_cache(path: Path, buf: mmap.mmap, problems: list[str]) -> None:
    problem = drop_page_cache([path])
    if problem:
        problems.append(problem)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf) > 0:
            pass
