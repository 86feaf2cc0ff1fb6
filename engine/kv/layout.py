"""Which layers share which block table: the KV groups the per-layer specs and the
``sliding_window_kv`` mode make. Pure Python: no torch.

Full-attention layers (and latent attention) form the main group: one block per ``block_size`` tokens
of the whole context, hashed for the prefix cache. Sliding-window layers form the window group when
the mode keeps only windows: a request holds there only the blocks its window can still see, in a
pool of their own, never hashed. A prefix-cache hit of ``H`` tokens then reuses the main group's
blocks and recomputes the window group's KV from the replay start (``replay_start``) on: the
window plus a margin before ``H`` (bounded replay), or the whole prompt (full replay).

Bounded replay is exact when the margin covers how far back the windowed layers reach: the k-th
windowed layer's KV at a position depends on the (k-1) windowed layers below it, each looking
``window - 1`` tokens further back, so a margin of ``(windowed layers - 1) * (window - 1)`` leaves
nothing out. With DeepSeek's short default (140 tokens) a deep model's replayed window sees a
truncated history, as theirs does: the price of recomputing a bounded suffix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.kv.specs import KVCacheSpec


@dataclass(frozen=True)
class KVLayout:
    block_size: int
    main_layers: tuple[int, ...]  # layer indexes of the main group (the whole context)
    window_layers: tuple[int, ...]  # layer indexes of the window group (empty: none)
    window: int | None  # the largest window of the window group
    mode: str = "full-context"
    replay_margin: int = 0
    # Where a window group's run of blocks may begin (tokens, a multiple of block_size): its layers'
    # kernels see positions from there, so batch-invariant attention, whose key tiles are aligned
    # to the positions it sees, needs it to be a multiple of those tiles.
    base_alignment: int = 0

    def __post_init__(self) -> None:
        if not self.base_alignment:
            object.__setattr__(self, "base_alignment", self.block_size)
        if self.base_alignment % self.block_size:
            raise ValueError(f"base_alignment {self.base_alignment} is not a multiple of {self.block_size}")

    @classmethod
    def from_specs(
        cls,
        specs: list[KVCacheSpec],
        mode: str = "full-context",
        replay_margin: int = 0,
        base_alignment: int = 0,
    ) -> KVLayout:
        windows = [getattr(spec, "window", None) for spec in specs]
        block_size = specs[0].block_size if specs else 1
        if base_alignment:  # whole blocks of whole tiles
            base_alignment = math.lcm(base_alignment, block_size)
        if mode == "full-context" or all(w is None for w in windows):
            return cls(block_size, tuple(range(len(specs))), (), None, mode, replay_margin, base_alignment)
        main = tuple(i for i, w in enumerate(windows) if w is None)
        windowed = tuple(i for i, w in enumerate(windows) if w is not None)
        window = max(w for w in windows if w is not None)
        return cls(block_size, main, windowed, window, mode, replay_margin, base_alignment)

    @property
    def has_window_group(self) -> bool:
        return bool(self.window_layers)

    @property
    def all_windowed(self) -> bool:
        """Every layer keeps only its window: one group, and nothing outlives a request to reuse."""
        return self.has_window_group and not self.main_layers

    @property
    def hybrid(self) -> bool:
        return self.has_window_group and bool(self.main_layers)

    def first_needed_block(self, start: int) -> int:
        """The first block a step feeding tokens from ``start`` on can still read in a windowed layer
        (its first query looks back ``window - 1`` tokens; one token more is kept for the step in
        flight under async scheduling)."""
        return self._aligned(start - self.window) // self.block_size

    def replay_start(self, hit_tokens: int) -> int:
        """Where the window group's recompute begins after a prefix hit of ``hit_tokens``: a block
        boundary, so the replayed blocks start whole."""
        if not self.hybrid:
            return hit_tokens
        if self.mode == "full-replay":
            return 0
        return self._aligned(hit_tokens - self.window - self.replay_margin)

    def _aligned(self, position: int) -> int:
        return max(0, position) // self.base_alignment * self.base_alignment

    def window_blocks_bound(self, max_num_seqs: int, max_num_batched_tokens: int) -> int:
        """Most window-group blocks the running requests can hold at once: each its window (and the
        kept token) plus a partial block at either end, and a step's new tokens over all of them."""
        per_request = -(-self.window // self.block_size) + 2 + self.base_alignment // self.block_size - 1
        return max_num_seqs * per_request + -(-max_num_batched_tokens // self.block_size)

    def exact_replay_margin(self) -> int:
        """The smallest margin with which bounded replay gives the KV a full recompute gives."""
        return max(0, len(self.window_layers) - 1) * (self.window - 1) if self.window else 0
