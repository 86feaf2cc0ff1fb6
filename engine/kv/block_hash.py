"""Content hashes for full KV blocks, identical in every process and on every machine.

A block's hash covers its parent's hash, its token ids and an optional extra key (cache salt),
so a hash names the whole prefix up to and including the block. The gateway and the KV store
compute the same chain as the engine, so the digest must never depend on Python's randomized
``hash()``: it is SHA-256 over a fixed little-endian encoding, truncated to 16 bytes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

BlockHash = bytes
HASH_BYTES = 16
ROOT_HASH: BlockHash = b"\x00" * HASH_BYTES


def hash_block(parent: BlockHash | None, token_ids: Sequence[int], extra: bytes | None = None) -> BlockHash:
    digest = hashlib.sha256()
    digest.update(parent if parent is not None else ROOT_HASH)
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    if extra:
        digest.update(b"\x01")
        digest.update(struct.pack("<I", len(extra)))
        digest.update(extra)
    return digest.digest()[:HASH_BYTES]


def hash_chain(
    token_ids: Sequence[int], block_size: int, extra: bytes | None = None, parent: BlockHash | None = None
) -> list[BlockHash]:
    """Hashes of every *full* block of ``token_ids``; a trailing partial block has no hash.

    The extra key (cache salt) enters the first block only: it changes every hash after it through
    the parent chain, so two tenants with different salts never share a block.
    """
    hashes: list[BlockHash] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start : start + block_size], extra if start == 0 else None)
        hashes.append(parent)
    return hashes


def salt_bytes(cache_salt: str | None) -> bytes | None:
    # A salt is an opaque key: any string is one, even with a lone surrogate that strict UTF-8 refuses.
    return cache_salt.encode("utf-8", "surrogatepass") if cache_salt else None
