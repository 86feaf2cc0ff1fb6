"""File tier: one file per block under a directory, on local disk or shared by a deployment's replicas.

Each file is a header (magic, version, the block hash, the tenant, the payload's length and a CRC-32
of hash, tenant and payload) followed by the payload. A file that is short, damaged or names another
hash is a miss and is deleted, never read as KV. Writes go to a unique temporary name in the same
directory and are renamed into place (atomic on POSIX), so a reader sees the old file, the whole new
one or none, and several processes may write the same block at once: the last rename wins and both
versions are valid. An entry's last use is the file's modification time (set from the tier's clock),
so a restarted replica rebuilds its index and retention from the files alone.

An onload announces the blocks it will ask for (``prefetch``): up to ``READ_AHEAD`` of their files
are read and checked on a few threads while the onload copies the ones before them (file reads and
CRC-32 release the GIL); ``get`` then takes the result. The threads only read; every change to the
index, the statistics and the files happens in the caller's thread.

``shared=True``: other processes add and delete files too. A hash this process has not seen is
looked up on disk, and a put rescans the directory first once ``SHARED_RESCAN_S`` have passed since
the last scan (or 50 times the last scan's duration, if longer: at most 2 % of the writer's time
goes to listing a large store), so the budget counts every replica's files: together the replicas
overshoot it by at most what they write in that interval (each one alone would count only its own
files, and N replicas would fill N budgets). A rescan reads the headers of new files only; the
others are a ``stat`` from the directory listing.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from engine.kv.block_hash import HASH_BYTES, BlockHash
from engine.kv.tiers.ledger import Ledger
from engine.kv.tiers.protocol import Clock, ReportsChanges, Retention, TierStats

MAGIC = b"CHKV"
VERSION = 1
HEADER = struct.Struct(f"<4sB{HASH_BYTES}sHQI")  # magic, version, hash, tenant length, payload length, crc
SUFFIX = ".kvb"
SHARED_RESCAN_S = 5.0
SCAN_TIME_SHARE = 0.02
READ_AHEAD = 16  # block files read ahead of an onload (32 MiB of Llama-8B blocks)
READ_THREADS = 8
# Read block files with O_DIRECT (one aligned read of the whole file, no page cache copy) where the
# filesystem allows it; buffered reads otherwise. Measured on the H200 host's disk
# (scripts/gpu/tune_disk_tier.py): with 8 threads the onload keeps up with the disk either way, and
# direct reads leave the page cache to other work.
DIRECT_READS = True
_PAGE = mmap.PAGESIZE


def encode_file(block_hash: BlockHash, tenant: str, payload) -> bytes:
    tenant_bytes = tenant.encode("utf-8", "surrogatepass")
    data = memoryview(payload).cast("B")
    crc = zlib.crc32(data, zlib.crc32(tenant_bytes, zlib.crc32(block_hash)))
    return HEADER.pack(MAGIC, VERSION, block_hash, len(tenant_bytes), data.nbytes, crc) + tenant_bytes


class DiskTier(ReportsChanges):
    def __init__(
        self,
        root: str | Path,
        retention: Retention,
        shared: bool = False,
        clock: Clock = time.time,
        name: str | None = None,
        allocate: Callable[[int], bytearray | memoryview] = bytearray,
    ) -> None:
        """``allocate``: the buffers files are read into (page-locked ones on CUDA, so the onload's
        copy from them is direct DMA and a promotion to the host tier can keep them)."""
        self.root = Path(root)
        self._allocate = allocate
        self.root.mkdir(parents=True, exist_ok=True)
        self.shared = shared
        self.name = name or ("shared" if shared else "disk")
        self._clock = clock
        self._stats = TierStats()
        self._ledger = Ledger(retention)
        self._ahead: deque[BlockHash] = deque()  # announced, not yet being read
        self._reading: dict[BlockHash, Future] = {}
        self._readers: ThreadPoolExecutor | None = None
        self.rebuild_index()

    # -- KVTier --------------------------------------------------------------------------------
    def put(self, block_hash: BlockHash, payload, tenant: str = "") -> bool:
        data = memoryview(payload).cast("B")
        header = encode_file(block_hash, tenant, data)
        nbytes = len(header) + data.nbytes
        if not self._ledger.fits(nbytes):
            return False
        replaced = self._ledger.remove(block_hash) is not None  # stored again below, if it lands
        self._make_room(tenant, nbytes)
        path = self._path(block_hash)
        path.parent.mkdir(exist_ok=True)
        tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(header)
                f.write(data)
            now = self._clock()
            os.utime(tmp, (now, now))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            if replaced:
                self._report_removed([block_hash])
            return False
        self._ledger.add(block_hash, tenant, nbytes, now)
        self._stats.puts += 1
        self._report_stored([block_hash])
        return True

    def get(self, block_hash: BlockHash) -> memoryview | None:
        reading = self._reading.pop(block_hash, None)
        self._read_ahead()
        if not self.contains(block_hash):
            self._stats.misses += 1
            return None
        result = (
            reading.result() if reading else _read_file(self._path(block_hash), block_hash, self._allocate)
        )
        payload = self._settle(block_hash, result)
        if payload is None:
            self._stats.misses += 1
            return None
        now = self._clock()
        try:
            os.utime(self._path(block_hash), (now, now))
        except OSError:
            pass  # deleted by another replica since the read: the payload read is still whole
        self._ledger.touch(block_hash, now)
        self._stats.hits += 1
        return payload

    def contains(self, block_hash: BlockHash) -> bool:
        if block_hash not in self._ledger:
            if not self.shared or not self._adopt(block_hash):
                return False
        if self._ledger.is_expired(block_hash, self._clock()):
            self._delete(block_hash)
            self._stats.expirations += 1
            return False
        return True

    def expire(self) -> int:
        if self.shared:
            self.rebuild_index()
        expired = self._ledger.expired(self._clock())
        self._delete(*expired)
        self._stats.expirations += len(expired)
        return len(expired)

    def stats(self) -> TierStats:
        return self._ledger.fill(self._stats)

    def prefetch(self, hashes: Sequence[BlockHash]) -> None:
        """Start reading these blocks' files, in order: ``get`` asks for them soon. Replaces the
        previous call's list (reads of it still under way finish unused)."""
        for reading in self._reading.values():
            reading.cancel()  # those not started yet
        self._reading.clear()
        self._ahead = deque(hashes)
        self._read_ahead()

    def _read_ahead(self) -> None:
        while self._ahead and len(self._reading) < READ_AHEAD:
            block_hash = self._ahead.popleft()
            if block_hash not in self._ledger or block_hash in self._reading:
                continue
            if self._readers is None:
                self._readers = ThreadPoolExecutor(READ_THREADS, thread_name_prefix=f"kv-{self.name}")
            self._reading[block_hash] = self._readers.submit(
                _read_file, self._path(block_hash), block_hash, self._allocate
            )

    # -- index ---------------------------------------------------------------------------------
    def rebuild_index(self) -> None:
        """The index from the files: a restarted replica starts from it, and a shared tier refreshes
        it with the other replicas' files. A file already indexed at the same size keeps its entry's
        tenant (only its time is read again); a new one's header is read, and one that does not parse
        is a damaged file and is deleted. Entries that appeared or vanished (on a shared tier, other
        replicas' writes and deletions) are reported to the hooks."""
        started = time.perf_counter()
        known = self._ledger.entries
        before = set(known)
        found: list[tuple[float, BlockHash, str, int]] = []
        for sub in os.scandir(self.root):
            if not sub.is_dir():
                continue
            for item in os.scandir(sub.path):
                if not item.name.endswith(SUFFIX) or item.name.startswith("."):
                    continue
                meta = self._indexed(item, known)
                if meta is None:
                    meta = self._read_header(Path(item.path))
                if meta is None:
                    Path(item.path).unlink(missing_ok=True)
                    continue
                found.append(meta)
        self._ledger = Ledger(self._ledger.retention)
        self._scanned_at = self._clock()
        for mtime, block_hash, tenant, nbytes in sorted(found):
            self._ledger.add(block_hash, tenant, nbytes, mtime)
        after = set(self._ledger.entries)
        self._report_removed(list(before - after))
        self._report_stored(list(after - before))
        self._rescan_after_s = max(SHARED_RESCAN_S, (time.perf_counter() - started) / SCAN_TIME_SHARE)

    @staticmethod
    def _indexed(item: os.DirEntry, known: dict) -> tuple[float, BlockHash, str, int] | None:
        """``item``'s index entry from the directory listing, if the index has its hash at its size."""
        try:
            block_hash = bytes.fromhex(item.name[: -len(SUFFIX)])
            entry = known.get(block_hash)
            if entry is None:
                return None
            stat = item.stat()
        except (ValueError, OSError):
            return None
        if stat.st_size != entry.nbytes:
            return None
        return stat.st_mtime, block_hash, entry.tenant, stat.st_size

    def _adopt(self, block_hash: BlockHash) -> bool:
        """A file another replica wrote: into the index, if its header is sound."""
        meta = self._read_header(self._path(block_hash))
        if meta is None or meta[1] != block_hash:
            return False
        mtime, _, tenant, nbytes = meta
        self._ledger.add(block_hash, tenant, nbytes, mtime)
        self._report_stored([block_hash])
        return True

    @staticmethod
    def _read_header(path: Path) -> tuple[float, BlockHash, str, int] | None:
        try:
            with open(path, "rb") as f:
                raw = f.read(HEADER.size)
                magic, version, block_hash, tenant_len, payload_len, _ = HEADER.unpack(raw)
                tenant = f.read(tenant_len).decode("utf-8", "surrogatepass")
                stat = os.fstat(f.fileno())
        except (OSError, struct.error, UnicodeDecodeError):
            return None
        if magic != MAGIC or version != VERSION or path.stem != block_hash.hex():
            return None
        return stat.st_mtime, block_hash, tenant, stat.st_size

    # -- files ---------------------------------------------------------------------------------
    def _path(self, block_hash: BlockHash) -> Path:
        name = block_hash.hex()
        return self.root / name[:2] / f"{name}{SUFFIX}"

    def _settle(self, block_hash: BlockHash, result: tuple[memoryview | None, bool]) -> memoryview | None:
        """A read's payload; a missing file leaves the index, a damaged one is deleted."""
        payload, missing = result
        if missing:
            self._unindex(block_hash)
        elif payload is None:
            self._stats.corrupt += 1
            self._delete(block_hash)
        return payload

    def _make_room(self, tenant: str, nbytes: int) -> None:
        if self.shared and self._clock() - self._scanned_at >= self._rescan_after_s:
            self.rebuild_index()  # the other replicas' files count too
        victims = self._ledger.victims_for(tenant, nbytes)
        self._delete(*victims)
        self._stats.evictions += len(victims)

    def _delete(self, *hashes: BlockHash) -> None:
        for block_hash in hashes:
            self._path(block_hash).unlink(missing_ok=True)
        self._unindex(*hashes)

    def _unindex(self, *hashes: BlockHash) -> None:
        """Out of the index, reported removed: every removal but a replacement comes here."""
        for block_hash in hashes:
            self._ledger.remove(block_hash)
        self._report_removed(list(hashes))


def _read_file(path: Path, block_hash: BlockHash, allocate=bytearray) -> tuple[memoryview | None, bool]:
    """(the payload if the whole file checks out, else None; whether the file was missing).
    Reads only: safe on the read-ahead threads."""
    if DIRECT_READS:
        try:
            return _read_file_direct(path, block_hash, allocate)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):  # O_DIRECT refused: read buffered
                return None, isinstance(e, FileNotFoundError)
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER.size)
            magic, version, stored_hash, tenant_len, payload_len, crc = HEADER.unpack(raw)
            tenant = f.read(tenant_len)
            # The length is checked against the file before it sizes a buffer: a damaged
            # header must not ask for exabytes.
            complete = os.fstat(f.fileno()).st_size == HEADER.size + tenant_len + payload_len
            payload = b""
            if complete:
                payload = memoryview(allocate(payload_len)).cast("B")
                complete = f.readinto(payload) == payload_len
    except FileNotFoundError:
        return None, True
    except (OSError, struct.error):
        return None, False
    return _checked(block_hash, magic, version, stored_hash, tenant, tenant_len, payload, crc, complete)


def _read_file_direct(path: Path, block_hash: BlockHash, allocate) -> tuple[memoryview | None, bool]:
    """``_read_file`` with one O_DIRECT read of the whole file into page-aligned memory."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        size = os.fstat(fd).st_size
        if size < HEADER.size:
            return None, False
        buf = _page_aligned(allocate, -(-size // _PAGE) * _PAGE)
        done = 0
        while done < size:
            n = os.preadv(fd, [buf[done:]], done)
            if n <= 0:
                break
            done += n
    finally:
        os.close(fd)
    magic, version, stored_hash, tenant_len, payload_len, crc = HEADER.unpack(buf[: HEADER.size])
    start = HEADER.size + tenant_len
    complete = done >= size and size == start + payload_len
    tenant, payload = bytes(buf[HEADER.size : start]), buf[start : start + payload_len]
    return _checked(block_hash, magic, version, stored_hash, tenant, tenant_len, payload, crc, complete)


def _page_aligned(allocate, nbytes: int) -> memoryview:
    """``allocate``'s buffer when it starts on a page boundary (O_DIRECT needs one), else an
    anonymous mapping."""
    buf = memoryview(allocate(nbytes)).cast("B")
    if ctypes.addressof(ctypes.c_char.from_buffer(buf)) % _PAGE:
        buf = memoryview(mmap.mmap(-1, nbytes))
    return buf


def _checked(block_hash, magic, version, stored_hash, tenant, tenant_len, payload, crc, complete):
    """The payload if the file read whole and its header and CRC match, else None (not missing)."""
    if (
        not complete
        or magic != MAGIC
        or version != VERSION
        or stored_hash != block_hash
        or len(tenant) != tenant_len
        or zlib.crc32(payload, zlib.crc32(tenant, zlib.crc32(block_hash))) != crc
    ):
        return None, False
    return memoryview(payload), False
