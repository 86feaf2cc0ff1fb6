"""Prompt-lookup drafts: find the request's latest n-gram earlier in its own tokens and propose
what followed it there. Pays off when the output quotes the prompt (code edits, summaries with
quotes, retrieval answers); costs no weights and no device time."""

from __future__ import annotations

import numpy as np

from engine.scheduler.request import Request
from engine.spec.proposer import Draft

# Longest match first: a longer match predicts its continuation better.
NGRAM_MAX = 4
NGRAM_MIN = 2


class NgramProposer:
    def __init__(self, ngram_max: int = NGRAM_MAX, ngram_min: int = NGRAM_MIN) -> None:
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min

    def propose(self, requests: list[Request], max_len: int) -> dict[str, Draft]:
        drafts = {}
        for request in requests:
            tokens = lookup(request.all_token_ids, max_len, self.ngram_max, self.ngram_min)
            if tokens:
                drafts[request.request_id] = Draft(tokens)
        return drafts

    def drop(self, request_id: str) -> None:
        """No per-request state."""


def lookup(history: list[int], max_len: int, ngram_max: int, ngram_min: int) -> list[int]:
    """The tokens after the latest earlier occurrence of the history's last n tokens (n from
    ``ngram_max`` down to ``ngram_min``), at most ``max_len``; [] when no n-gram recurs."""
    tokens = np.asarray(history, dtype=np.int64)
    n_tokens = len(tokens)
    for n in range(min(ngram_max, n_tokens - 1), ngram_min - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
        starts = np.flatnonzero((windows == tokens[-n:]).all(axis=1))
        if len(starts):
            follow = int(starts[-1]) + n
            return tokens[follow : follow + max_len].tolist()
    return []
