"""What a tier holds for one block: the block's parent hash and token ids, then its KV bytes.

The KV manager verifies parent and tokens on every device-pool hit because hashes can collide;
onloading verifies them the same way, so a lower tier can never be less careful than the pool.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from engine.kv.block_hash import HASH_BYTES, ROOT_HASH, BlockHash

_HEAD = struct.Struct(f"<{HASH_BYTES}sI")


@dataclass
class BlockRecord:
    parent_hash: BlockHash | None
    token_ids: tuple[int, ...]
    kv: memoryview  # every layer's pages of the block, as block_io lays them out


def encode_record(parent_hash: BlockHash | None, token_ids: Sequence[int], kv) -> bytearray:
    kv = memoryview(kv).cast("B")
    out = bytearray(_HEAD.pack(parent_hash or ROOT_HASH, len(token_ids)))
    out += struct.pack(f"<{len(token_ids)}q", *token_ids)
    out += kv
    return out


def decode_record(payload: memoryview) -> BlockRecord | None:
    """None for a payload too short for what its head announces."""
    payload = payload.cast("B") if payload.format != "B" else payload
    if payload.nbytes < _HEAD.size:
        return None
    parent, n = _HEAD.unpack_from(payload)
    start = _HEAD.size + 8 * n
    if payload.nbytes < start:
        return None
    tokens = struct.unpack_from(f"<{n}q", payload, _HEAD.size)
    return BlockRecord(None if parent == ROOT_HASH else parent, tokens, payload[start:])
