"""A proposer of known acceptance rate, for benchmarks and tests only (not an ``EngineConfig``
choice: a benchmark attaches it to an engine's speculator itself, see ``engine/bench/speculative_grid.py``).

Greedy decoding of fixed weights is deterministic, so a request's continuation can be recorded by
running it once without speculation. The oracle then drafts the recorded next tokens, each replaced
by a wrong one with probability ``1 - p``: every draft token is right with probability ``p``,
independently, which makes the benefit of speculation at a given acceptance rate measurable. Which
positions are wrong is fixed per (seed, prompt, position), so every draft length and the confidence
scheduler see the same wrong tokens. Its confidence is what a calibrated draft model would report:
the cumulative probability ``p ** (i + 1)`` that the first ``i + 1`` tokens are right, nothing about
which ones are.

A request whose output has left the recording (a near-tie that the verification pass, with other
kernels and shapes than plain decoding, breaks the other way; possible in bf16) gets no more drafts:
the recorded tokens no longer continue it, and drafting them would only lower the acceptance below
``p``. The benchmark counts such requests.
"""

from __future__ import annotations

import hashlib

from engine.scheduler.request import Request
from engine.spec.proposer import Draft

CONFIDENCE = ("calibrated", "none")


class OracleProposer:
    def __init__(
        self,
        continuations: dict[tuple[int, ...], list[int]],
        acceptance: float,
        vocab_size: int,
        seed: int = 0,
        confidence: str = "calibrated",
    ) -> None:
        """``continuations``: prompt token ids -> the greedy output recorded without speculation.
        ``confidence``: calibrated (``p ** (i + 1)``, as a draft model's probabilities) or none
        (1.0, as n-gram lookup, leaving the estimate to the request's running acceptance)."""
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
        if confidence not in CONFIDENCE:
            raise ValueError(f"confidence must be one of {', '.join(CONFIDENCE)}, got {confidence!r}")
        self.confidence = confidence
        self.continuations = continuations
        self.acceptance = acceptance
        self.vocab_size = vocab_size
        self.seed = seed
        self._right: dict[tuple[int, ...], list[bool]] = {}
        self._checked: dict[str, int] = {}  # request id -> output tokens found equal to the recording
        self.diverged: set[str] = set()

    def propose(self, requests: list[Request], max_len: int) -> dict[str, Draft]:
        drafts = {}
        for request in requests:
            key = tuple(request.prompt_token_ids)
            recorded = self.continuations.get(key)
            if recorded is None or not self._on_record(request, recorded):
                continue
            start = len(request.output_token_ids)
            right = self._right_at(key, len(recorded))[start : start + max_len]
            if not right:
                continue
            tokens = [
                token if ok else (token + 1) % self.vocab_size
                for token, ok in zip(recorded[start : start + len(right)], right, strict=True)
            ]
            drafts[request.request_id] = Draft(
                tokens, self._confidence(len(tokens)), calibrated=self.confidence == "calibrated"
            )
        return drafts

    def _confidence(self, n: int) -> list[float]:
        if self.confidence == "none":
            return [1.0] * n
        return [self.acceptance ** (i + 1) for i in range(n)]

    def drop(self, request_id: str) -> None:
        self._checked.pop(request_id, None)

    def _on_record(self, request: Request, recorded: list[int]) -> bool:
        rid = request.request_id
        if rid in self.diverged:
            return False
        output = request.output_token_ids
        checked = self._checked.get(rid, 0)
        if output[checked:] != recorded[checked : len(output)]:
            self.diverged.add(rid)
            return False
        self._checked[rid] = len(output)
        return True

    def _right_at(self, key: tuple[int, ...], length: int) -> list[bool]:
        right = self._right.get(key)
        if right is None:
            right = [uniform(self.seed, key, i) < self.acceptance for i in range(length)]
            self._right[key] = right
        return right


def uniform(seed: int, key: tuple[int, ...], position: int) -> float:
    """A draw in [0, 1) fixed by (seed, prompt, position), independent of scheduling and batch."""
    digest = hashlib.blake2b(f"{seed}:{position}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64
