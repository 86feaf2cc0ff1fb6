"""Per-request blocks of the KV group whose layers see only the last ``window`` tokens.

A request holds a run of consecutive blocks, the first of them its ``base``: block ``base + i`` of
the request is ``ids(request)[i]``. Blocks every later query is past (``KVLayout.first_needed_block``)
go back to the pool as the request moves on; a request admitted at a replay start holds nothing
below it. The model runner shifts these layers' block tables and sequence lengths by ``base``
blocks, so their attention kernels read only held blocks (and, after a replay start, nothing below
it), and a window's mask, relative to the query, is unchanged by the shift. Pure Python: no torch.
"""

from __future__ import annotations

from engine.kv.block_pool import Block, BlockPool
from engine.kv.layout import KVLayout


class WindowBlocks:
    def __init__(self, pool: BlockPool, layout: KVLayout) -> None:
        self.pool = pool
        self.layout = layout
        self.block_size = layout.block_size
        self._blocks: dict[str, list[Block]] = {}
        self._ids: dict[str, list[int]] = {}
        self._base: dict[str, int] = {}

    def ids(self, request_id: str) -> list[int]:
        """The held blocks' ids from ``base`` on: a live list grown at its end, replaced (never
        shrunk in place) when blocks leave, so a holder of the old list sees a new owner."""
        return self._ids.get(request_id, [])

    def base(self, request_id: str) -> int:
        return self._base.get(request_id, 0)

    def blocks(self, request_id: str) -> list[Block]:
        return self._blocks.get(request_id, [])

    def adopt(self, request_id: str, first_block: int, blocks: list[Block]) -> None:
        """Start the request's run with prefix-cache hit ``blocks`` (referenced by the caller) as
        its blocks ``first_block ..``."""
        self._blocks[request_id] = list(blocks)
        self._ids[request_id] = [b.block_id for b in blocks]
        self._base[request_id] = first_block

    def num_held(self, request_id: str) -> int:
        return len(self._blocks.get(request_id, ()))

    def needed(self, request_id: str, start: int, total_tokens: int) -> int:
        """New blocks for positions up to ``total_tokens`` once the blocks before the window of a
        step from ``start`` are gone (what ``allocate`` will take)."""
        end = -(-total_tokens // self.block_size)
        if request_id not in self._blocks:
            return max(0, end - start // self.block_size)
        base = self._base[request_id]
        return max(0, end - (base + len(self._blocks[request_id])))

    def release_behind(self, request_id: str, start: int) -> None:
        """Free the blocks no query of a step from ``start`` on can read."""
        blocks = self._blocks.get(request_id)
        if not blocks:
            return
        base = self._base[request_id]
        drop = min(self.layout.first_needed_block(start) - base, len(blocks))
        if drop <= 0:
            return
        self.pool.free(reversed(blocks[:drop]))
        del blocks[:drop]
        self._base[request_id] = base + drop
        self._ids[request_id] = [b.block_id for b in blocks]

    def allocate(self, request_id: str, start: int, total_tokens: int) -> None:
        """Take the blocks ``needed`` says (the caller checked the pool has them)."""
        n = self.needed(request_id, start, total_tokens)
        if request_id not in self._blocks:
            self._blocks[request_id] = []
            self._ids[request_id] = []
            self._base[request_id] = start // self.block_size
        if n:
            fresh = self.pool.allocate(n)
            self._blocks[request_id].extend(fresh)
            self._ids[request_id].extend(b.block_id for b in fresh)

    def trim(self, request_id: str, num_tokens: int) -> None:
        """Keep only the blocks holding positions before ``num_tokens`` (rejected draft tokens)."""
        blocks = self._blocks.get(request_id)
        if not blocks:
            return
        keep = max(0, -(-num_tokens // self.block_size) - self._base[request_id])
        if len(blocks) <= keep:
            return
        self.pool.free(reversed(blocks[keep:]))
        del blocks[keep:]
        self._ids[request_id] = [b.block_id for b in blocks]

    def free(self, request_id: str) -> None:
        self.pool.free(reversed(self._blocks.pop(request_id, [])))
        self._ids.pop(request_id, None)
        self._base.pop(request_id, None)
