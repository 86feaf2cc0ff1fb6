"""The proposer seam: whatever drafts the tokens a target model then verifies in one forward pass.

Implementations: ``NgramProposer`` (prompt lookup, no weights), ``DraftModelProposer`` (a small
model with the same tokenizer) and ``MTPProposer`` (the checkpoint's own multi-token-prediction
layers); ``tests/engine/spec/test_proposer_contract.py`` runs the contract against each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from engine.scheduler.request import Request


@dataclass
class Draft:
    token_ids: list[int]
    # confidence[i]: the proposer's probability that token_ids[: i + 1] are all right (non-increasing);
    # a proposer without probabilities (n-gram lookup) says 1.0 and leaves it to the running acceptance.
    confidence: list[float] = field(default_factory=list)
    # Whether confidence is a calibrated probability (draft model, MTP): the policy then takes it as
    # the acceptance estimate as it is; otherwise it uses the request's running acceptance instead.
    calibrated: bool = False

    def __post_init__(self) -> None:
        if not self.confidence:
            self.confidence = [1.0] * len(self.token_ids)
        if len(self.confidence) != len(self.token_ids):
            raise ValueError("a draft needs one confidence per token")


@runtime_checkable
class Proposer(Protocol):
    def propose(self, requests: list[Request], max_len: int) -> dict[str, Draft]:
        """Drafts of at most ``max_len`` tokens continuing each request's ``all_token_ids`` (every
        token known on the host). A request may get none (nothing to propose)."""
        ...

    def drop(self, request_id: str) -> None:
        """Forget a finished request's state (unknown ids are ignored)."""
        ...
