"""Constrain a step's logits: the token bitmask is filled on the host, then applied in one operation."""

from __future__ import annotations

import torch

MIN_MASK_ROWS = 64  # a runner's first mask buffer holds this many rows; it doubles when a step needs more


def constrained_rows(requests: list) -> list[int]:
    """Rows of the step whose token a grammar constrains this step."""
    rows = []
    for row, request in enumerate(requests):
        grammar = getattr(request, "grammar", None)
        if grammar is not None and grammar.active:
            rows.append(row)
    return rows


def samples_under_grammar(scheduled: list) -> bool:
    """Whether a step samples a token for a request with a grammar (its mask needs the previous
    step's tokens accepted first)."""
    return any(s.samples and s.request.grammar is not None for s in scheduled)


class GrammarMasks:
    """A runner's host bitmask buffers, reused step after step, and their filling by the matchers.

    On CUDA two pinned buffers alternate and each waits on the event of its last copy before it is
    refilled, so the copy is truly asynchronous (it does not hold the host behind the queued forward)
    and a copy still in flight is never overwritten. On CPU the one buffer is the mask itself."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned = device.type == "cuda"
        self._buffers: list[torch.Tensor | None] = [None, None]
        self._copied: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0

    def host_buffer(self, rows: int, words: int) -> torch.Tensor:
        """``rows`` x ``words`` int32 on the host, free to fill (its previous copy has landed)."""
        turn = self._turn
        if self._pinned:
            self._turn ^= 1
        copied = self._copied[turn]
        if copied is not None:
            copied.synchronize()
            self._copied[turn] = None
        buffer = self._buffers[turn]
        if buffer is None or buffer.shape[0] < rows or buffer.shape[1] != words:
            size = max(MIN_MASK_ROWS, 1 << (rows - 1).bit_length())
            buffer = torch.empty((size, words), dtype=torch.int32, pin_memory=self._pinned)
            self._buffers[turn] = buffer
        self._current = turn
        return buffer[:rows]

    def fill(self, matchers: list, mask: torch.Tensor, rows: list[int]) -> None:
        """Each matcher's allowed tokens into its row of ``mask``, one matcher after the other:
        on the H200's host that is 2-3 us a row, while xgrammar's batch filler pays ~250 us handing
        the work to its threads (420 against 156 us at 64 rows, scripts/gpu/profile_grammar_host.py)."""
        for matcher, row in zip(matchers, rows, strict=True):
            matcher.fill_next_token_bitmask(mask, row)

    def to_device(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` (the last ``host_buffer``) on the device, copied behind an event on CUDA."""
        if not self._pinned:
            return mask.to(self.device)
        on_device = mask.to(self.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._copied[self._current] = event
        return on_device


def apply_grammars(logits: torch.Tensor, requests: list, masks: GrammarMasks) -> None:
    """Mask, in place, every token the request's grammar forbids at its row of ``logits``."""
    rows = constrained_rows(requests)
    if not rows:
        return
    mask = masks.host_buffer(len(logits), -(-logits.shape[-1] // 32))
    if len(rows) < len(logits):
        # Free rows allow every token, so the whole batch is masked without an index list.
        mask.fill_(-1)
    matched = [row for row in rows if not _fill_without_matcher(requests[row].grammar, mask, row)]
    if matched:
        masks.fill([requests[row].grammar.matcher for row in matched], mask, matched)
    _apply(logits, mask, masks)


def apply_draft_grammars(logits: torch.Tensor, scheduled: list, masks: GrammarMasks) -> None:
    """A verify step's logits (each request's rows in turn: its last token's, then one per draft
    token), masked in place: a request with drafts gets each row's mask from its grammar advanced
    through the draft tokens before it (``RequestGrammar.fill_draft_masks``), one without as
    ``apply_grammars`` masks it. Free rows allow every token."""
    if not any(s.request.grammar is not None and s.request.grammar.active for s in scheduled):
        return
    mask = masks.host_buffer(len(logits), -(-logits.shape[-1] // 32))
    mask.fill_(-1)
    row = 0
    for s in scheduled:
        grammar = s.request.grammar
        if grammar is not None and grammar.active:
            if s.num_draft_tokens:
                grammar.fill_draft_masks(s.draft_token_ids, mask, row)
            elif not _fill_without_matcher(grammar, mask, row):
                grammar.matcher.fill_next_token_bitmask(mask, row)
        row += s.num_draft_tokens + 1
    _apply(logits, mask, masks)


def _fill_without_matcher(grammar, mask: torch.Tensor, row: int) -> bool:
    """A row that needs no matcher: a forced token, or the grammar's first step (its start state's
    row, computed once per compiled grammar); False when the matcher must fill it."""
    forced, first = grammar.forced_token, grammar.first_mask
    if forced is not None:
        allow_only(mask[row], forced)
        return True
    if first is not None and first.shape[0] == mask.shape[1]:
        mask[row].copy_(first)
        return True
    return False


def _apply(logits: torch.Tensor, mask: torch.Tensor, masks: GrammarMasks) -> None:
    import xgrammar as xgr

    xgr.apply_token_bitmask_inplace(logits, masks.to_device(mask))


def allow_only(row: torch.Tensor, token_id: int) -> None:
    """Set a bitmask row (int32 words, bit i of word j is token 32 j + i) to allow one token."""
    row.zero_()
    bit = 1 << (token_id % 32)
    row[token_id // 32] = bit - (1 << 32) if bit >= 1 << 31 else bit
