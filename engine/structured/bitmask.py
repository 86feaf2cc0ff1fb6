"""Constrain a step's logits: the token bitmask is filled on the host, then applied in one operation."""

from __future__ import annotations

import torch


def constrained_rows(requests: list) -> list[int]:
    """Rows of the step whose token a grammar constrains this step."""
    rows = []
    for row, request in enumerate(requests):
        grammar = getattr(request, "grammar", None)
        if grammar is not None and grammar.active:
            rows.append(row)
    return rows


def apply_grammars(logits: torch.Tensor, requests: list) -> None:
    """Mask, in place, every token the request's grammar forbids at its row of ``logits``."""
    rows = constrained_rows(requests)
    if not rows:
        return
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(len(logits), logits.shape[-1])
    for row in rows:
        requests[row].grammar.matcher.fill_next_token_bitmask(bitmask, row)
    xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True), indices=rows)
