"""A proposer of known acceptance rate, for benchmarks and tests only (not an ``EngineConfig``
choice: a benchmark attaches it to an engine's speculator itself, see ``engine/bench/speculative_grid.py``).

It drafts as many tokens as it is asked for, for every request at every step, and reports the
confidence a calibrated draft model would: the cumulative probability ``p ** (i + 1)`` that the
first ``i + 1`` tokens are accepted. The tokens themselves are pseudo-random ids: whether they are
accepted is decided by the runner's ``acceptance_override`` (``engine/spec/forced_acceptance.py``),
which the bench installs with the same ``p``, not by their content. (Drafting a recorded greedy
continuation instead stops working in bf16: near-ties broken differently by the verification pass
move a request off its recording after a few tokens, and the drafts then accept nothing.)
"""

from __future__ import annotations

import random

from engine.scheduler.request import Request
from engine.spec.proposer import Draft

CONFIDENCE = ("calibrated", "none")
POOL = 4099  # prime: consecutive drafts start at varying offsets


class OracleProposer:
    def __init__(
        self, acceptance: float, vocab_size: int, seed: int = 0, confidence: str = "calibrated"
    ) -> None:
        """``confidence``: calibrated (``p ** (i + 1)``, as a draft model's probabilities) or none
        (1.0, as n-gram lookup, leaving the estimate to the request's running acceptance)."""
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
        if confidence not in CONFIDENCE:
            raise ValueError(f"confidence must be one of {', '.join(CONFIDENCE)}, got {confidence!r}")
        self.acceptance = acceptance
        self.vocab_size = vocab_size
        self.confidence = confidence
        rng = random.Random(seed)
        # Drafts are slices of one pool of random ids: drawing fresh ones per token would add host
        # time per step that no real proposer spends on this.
        self._pool = [rng.randrange(vocab_size) for _ in range(POOL)]
        self._offset = 0
        self._by_length: dict[int, list[float]] = {}

    def propose(self, requests: list[Request], max_len: int) -> dict[str, Draft]:
        if max_len <= 0:
            return {}
        confidence = self._confidence(max_len)
        calibrated = self.confidence == "calibrated"
        drafts = {}
        for r in requests:
            if self._offset + max_len > POOL:
                self._offset = 0
            drafts[r.request_id] = Draft(
                self._pool[self._offset : self._offset + max_len], confidence, calibrated
            )
            self._offset += max_len + 1
        return drafts

    def _confidence(self, n: int) -> list[float]:
        confidence = self._by_length.get(n)
        if confidence is None:
            p = 1.0 if self.confidence == "none" else self.acceptance
            confidence = self._by_length[n] = [p ** (i + 1) for i in range(n)]
        return confidence

    def drop(self, request_id: str) -> None:
        pass
