"""Turn a SchedulerOutput into the flat tensors one forward pass needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.layers.attention import AttentionMetadata
from engine.scheduler.output import SchedulerOutput


@dataclass
class ModelInputs:
    token_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    meta: AttentionMetadata
    logits_indices: torch.Tensor  # int64 [S]: last fed token of each request that samples
    sample_rows: list[int]  # index into out.scheduled of each sampling request


def build_inputs(out: SchedulerOutput, block_size: int, device: torch.device) -> ModelInputs:
    token_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    seq_lens: list[int] = []
    query_start_loc = [0]
    logits_indices: list[int] = []
    sample_rows: list[int] = []
    max_blocks = max(len(s.block_ids) for s in out.scheduled)
    block_tables = []
    for row, s in enumerate(out.scheduled):
        token_ids.extend(s.token_ids)
        for pos in range(s.start, s.start + s.num_tokens):
            positions.append(pos)
            slots.append(s.block_ids[pos // block_size] * block_size + pos % block_size)
        seq_lens.append(s.start + s.num_tokens)
        query_start_loc.append(query_start_loc[-1] + s.num_tokens)
        block_tables.append(s.block_ids + [0] * (max_blocks - len(s.block_ids)))
        if s.samples:
            logits_indices.append(query_start_loc[-1] - 1)
            sample_rows.append(row)

    def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

    meta = AttentionMetadata(
        slot_mapping=tensor(slots, torch.int64),
        block_tables=tensor(block_tables, torch.int32),
        seq_lens=tensor(seq_lens, torch.int32),
        query_start_loc=tensor(query_start_loc, torch.int32),
        decode_only=all(s.num_tokens == 1 for s in out.scheduled),
    )
    return ModelInputs(
        token_ids=tensor(token_ids, torch.int64),
        positions=tensor(positions, torch.int64),
        meta=meta,
        logits_indices=tensor(logits_indices, torch.int64),
        sample_rows=sample_rows,
    )
