"""Turn a SchedulerOutput into the flat tensors one forward pass needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from engine.layers.attention import AttentionMetadata, DecodeRows
from engine.runner.host_copy import to_device
from engine.scheduler.output import SchedulerOutput


@dataclass
class ModelInputs:
    token_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    meta: AttentionMetadata
    # int64: the last fed token of each request that samples, and before it its draft positions
    # (speculative decoding: 1 + num_draft_tokens rows per sampling request, in order).
    logits_indices: torch.Tensor
    sample_rows: list[int]  # index into out.scheduled of each sampling request


def build_inputs(
    out: SchedulerOutput,
    block_size: int,
    device: torch.device,
    before_copies: Callable[[], None] | None = None,
    feed: Callable[[torch.Tensor, list[int]], None] | None = None,
    split_decode_rows: bool = False,
) -> ModelInputs:
    """``feed(token_ids, positions)`` writes the device-side ids of tokens still pending there
    (async scheduling: the previous step's samples) into the flat token tensor.
    ``split_decode_rows``: give a mixed step's one-token requests their own ``DecodeRows`` (only
    latent attention reads them; other models would copy them for nothing)."""
    scheduled = out.scheduled
    num_seqs = len(scheduled)
    num_tokens = [s.num_tokens for s in scheduled]
    query_start_loc = np.zeros(num_seqs + 1, dtype=np.int64)
    np.cumsum(num_tokens, out=query_start_loc[1:])
    total = int(query_start_loc[-1])
    token_ids = np.empty(total, dtype=np.int64)
    positions = np.empty(total, dtype=np.int64)
    slots = np.empty(total, dtype=np.int64)
    seq_lens = np.empty(num_seqs, dtype=np.int64)
    max_blocks = max(len(s.block_ids) for s in scheduled)
    block_tables = np.zeros((num_seqs, max_blocks), dtype=np.int32)
    logits_indices: list[int] = []
    sample_rows: list[int] = []
    pending: list[int] = []
    windowed = scheduled[0].window_block_ids is not None
    if windowed:
        window = _GroupTables(scheduled, total, block_size)
    for row, s in enumerate(scheduled):
        lo, hi = int(query_start_loc[row]), int(query_start_loc[row + 1])
        blocks = np.asarray(s.block_ids, dtype=np.int64)
        block_tables[row, : len(blocks)] = blocks
        token_ids[lo:hi] = s.token_ids
        pos = np.arange(s.start, s.start + s.num_tokens, dtype=np.int64)
        positions[lo:hi] = pos
        slots[lo:hi] = blocks[pos // block_size - s.block_base] * block_size + pos % block_size
        if s.reused_until > s.start:  # replayed for the window group: the main group keeps its KV
            slots[lo:hi][pos < s.reused_until] = -1
        seq_lens[row] = s.start + s.num_tokens - s.block_base * block_size
        if windowed:
            window.add(row, lo, hi, s, pos)
        if s.samples:
            logits_indices.extend(range(hi - 1 - s.num_draft_tokens, hi))
            sample_rows.append(row)
        if s.pending_token:
            pending.append(hi - 1 - s.num_draft_tokens)

    if before_copies is not None:
        before_copies()

    def tensor(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return to_device(values, dtype, device)

    one_token = np.flatnonzero(np.asarray(num_tokens) == 1)
    decode_rows = None
    if split_decode_rows and 0 < len(one_token) < num_seqs:
        decode_rows = DecodeRows(
            token_rows=tensor(query_start_loc[one_token], torch.int64),
            block_tables=tensor(block_tables[one_token], torch.int32),
            seq_lens=tensor(seq_lens[one_token], torch.int32),
        )
    meta = AttentionMetadata(
        slot_mapping=tensor(slots, torch.int64),
        block_tables=tensor(block_tables, torch.int32),
        seq_lens=tensor(seq_lens, torch.int32),
        query_start_loc=tensor(query_start_loc, torch.int32),
        decode_only=len(one_token) == num_seqs,
        fresh_prefill_lens=num_tokens
        if all(s.start == 0 and not s.reused_until for s in scheduled)
        else None,
        host_query_lens=num_tokens,
        host_seq_lens=seq_lens.tolist(),
        decode_rows=decode_rows,
    )
    if windowed:
        meta.window = AttentionMetadata(
            slot_mapping=tensor(window.slots, torch.int64),
            block_tables=tensor(window.block_tables, torch.int32),
            seq_lens=tensor(window.seq_lens, torch.int32),
            query_start_loc=meta.query_start_loc,
            decode_only=meta.decode_only,
            host_query_lens=num_tokens,
            host_seq_lens=window.seq_lens.tolist(),
        )
    token_tensor = tensor(token_ids, torch.int64)
    if pending and feed is not None:
        feed(token_tensor, pending)
    return ModelInputs(
        token_ids=token_tensor,
        positions=tensor(positions, torch.int64),
        meta=meta,
        logits_indices=tensor(np.asarray(logits_indices, dtype=np.int64), torch.int64),
        sample_rows=sample_rows,
    )


class _GroupTables:
    """The window group's slots, block tables and sequence lengths, shifted by each request's base
    block (``engine/kv/window_blocks.py``): its layers' kernels see a context starting there."""

    def __init__(self, scheduled, total: int, block_size: int) -> None:
        self.block_size = block_size
        self.slots = np.empty(total, dtype=np.int64)
        self.seq_lens = np.empty(len(scheduled), dtype=np.int64)
        width = max(len(s.window_block_ids) for s in scheduled)
        self.block_tables = np.zeros((len(scheduled), max(width, 1)), dtype=np.int32)

    def add(self, row: int, lo: int, hi: int, s, pos: np.ndarray) -> None:
        bs = self.block_size
        blocks = np.asarray(s.window_block_ids, dtype=np.int64)
        self.block_tables[row, : len(blocks)] = blocks
        self.slots[lo:hi] = blocks[pos // bs - s.window_base] * bs + pos % bs
        self.seq_lens[row] = s.start + s.num_tokens - s.window_base * bs
