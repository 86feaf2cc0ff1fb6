"""Confidence-scheduled verification: how many draft tokens each request verifies this step.

Per request, draft position i is worth its expected acceptance, the probability that the first
i + 1 draft tokens are all kept, counted once (``expected_gain``): a calibrated proposer's (draft
model, MTP) cumulative confidence is that probability already; an uncalibrated one (n-gram lookup,
confidence 1.0) gets the request's running per-token acceptance to the power i + 1. Per batch, a
step of T tokens costs t(T) = a + b*T, fitted to the measured step times. Positions are added best
first while they raise the expected emitted tokens per second, (E + g) / t(T + 1) > E / t(T): in
the latency-bound regime (b*T << a) a token costs almost nothing and whole drafts go; when the
batch is compute-bound every extra token costs its share of the step and speculation switches
itself off.

``pays_at`` decides before the drafts exist (async scheduling must know whether to wait for the
step in flight), with the same gain for each request's first position: the first-token confidence
of its last calibrated draft, else its running acceptance. So that a request once judged not worth
drafting is not shut out for good, every decision relaxes that evidence toward the prior
(``RELAX`` per decision): after some tens of steps without drafts it is asked again.
Pure Python: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.spec.proposer import Draft

# Prior belief in a request's per-token acceptance, as pseudo-counts, and how fast it forgets.
PRIOR_ACCEPTED = 2.0
PRIOR_REJECTED = 1.0
ACCEPTANCE_DECAY = 0.9
PRIOR_RATE = PRIOR_ACCEPTED / (PRIOR_ACCEPTED + PRIOR_REJECTED)
# Per pays_at decision, a request's evidence keeps this share of its distance from the prior: from
# an acceptance of 0.2 back to a batch-256 H200 break-even of ~0.48 takes ~45 decisions.
RELAX = 0.98
# Never verify a position less likely than this to be kept, however cheap the token.
MIN_GAIN = 0.05
# Step times: forget older steps by this factor per step, and fit only once the batch sizes differ.
STEP_TIME_DECAY = 0.99
MIN_STEPS_FOR_FIT = 8


class StepTimeModel:
    """Least-squares fit t(T) = a + b*T over the recent steps (exponentially weighted)."""

    def __init__(self, decay: float = STEP_TIME_DECAY) -> None:
        self.decay = decay
        self._w = self._t = self._y = self._tt = self._ty = 0.0
        self.steps = 0

    def observe(self, num_tokens: int, seconds: float) -> None:
        d = self.decay
        self._w = self._w * d + 1.0
        self._t = self._t * d + num_tokens
        self._y = self._y * d + seconds
        self._tt = self._tt * d + num_tokens * num_tokens
        self._ty = self._ty * d + num_tokens * seconds
        self.steps += 1

    def fit(self) -> tuple[float, float] | None:
        """(a, b) in seconds and seconds per token; None until enough steps of different sizes."""
        if self.steps < MIN_STEPS_FOR_FIT:
            return None
        var = self._tt / self._w - (self._t / self._w) ** 2
        if var < 1e-6:
            return None
        b = max(0.0, (self._ty / self._w - self._t * self._y / self._w**2) / var)
        a = max(1e-9, self._y / self._w - b * self._t / self._w)
        return a, b


@dataclass
class _Estimate:
    """A request's evidence: its drafts' kept and rejected tokens (as pseudo-counts) and the
    first-token confidence of its last calibrated draft, as of the policy's decision ``clock``."""

    accepted: float = PRIOR_ACCEPTED
    rejected: float = PRIOR_REJECTED
    first: float | None = None
    clock: int = 0

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def relax(self, clock: int) -> _Estimate:
        """Fade the evidence toward the prior by ``RELAX`` per decision since the last update."""
        f = RELAX ** max(clock - self.clock, 0)
        self.accepted = PRIOR_ACCEPTED + (self.accepted - PRIOR_ACCEPTED) * f
        self.rejected = PRIOR_REJECTED + (self.rejected - PRIOR_REJECTED) * f
        if self.first is not None:
            self.first = PRIOR_RATE + (self.first - PRIOR_RATE) * f
        self.clock = clock
        return self


class SpeculationPolicy:
    def __init__(
        self, max_draft_len: int, scheduling: str = "confidence", step_time: StepTimeModel | None = None
    ):
        self.max_draft_len = max_draft_len
        self.scheduling = scheduling
        self.step_time = step_time or StepTimeModel()
        self._estimates: dict[str, _Estimate] = {}
        self._clock = 0  # pays_at decisions so far

    def _estimate(self, request_id: str, create: bool = False) -> _Estimate:
        estimate = self._estimates.get(request_id)
        if estimate is None:
            estimate = _Estimate(clock=self._clock)
            if create:
                self._estimates[request_id] = estimate
        return estimate.relax(self._clock)

    def acceptance(self, request_id: str) -> float:
        """The request's running per-token acceptance."""
        return self._estimate(request_id).rate

    def expected_gain(self, request_id: str, position: int, confidence: float | None) -> float:
        """The probability that draft tokens 0..``position`` of the request are all kept: a
        calibrated ``confidence`` as it is, None (uncalibrated) from the running acceptance."""
        if confidence is not None:
            return confidence
        return self.acceptance(request_id) ** (position + 1)

    def record(self, request_id: str, num_drafted: int, num_accepted: int) -> None:
        """A verified draft: ``num_accepted`` of its ``num_drafted`` tokens were kept."""
        if num_drafted <= 0:
            return
        a = self._estimate(request_id, create=True)
        d = ACCEPTANCE_DECAY**num_drafted
        a.accepted = a.accepted * d + num_accepted
        a.rejected = a.rejected * d + (1.0 if num_accepted < num_drafted else 0.0)

    def forget(self, request_id: str) -> None:
        self._estimates.pop(request_id, None)

    def pays_at(self, batch_tokens: int, num_decodes: int, request_ids) -> bool:
        """Whether the first draft token of the likeliest request would raise throughput at this
        batch, by the gain ``draft_lengths`` would give it; when not, speculation is off for the step."""
        if self.scheduling == "fixed":
            return True
        self._clock += 1
        best = max(
            (self.expected_gain(rid, 0, self._estimate(rid).first) for rid in request_ids), default=0.0
        )
        return best >= MIN_GAIN and self._worth(best, float(max(num_decodes, 1)), batch_tokens)

    def draft_lengths(self, drafts: dict[str, Draft], batch_tokens: int, num_decodes: int) -> dict[str, int]:
        """How many tokens of each draft to verify, given the step's other ``batch_tokens`` tokens
        of which ``num_decodes`` emit a token each."""
        if self.scheduling == "fixed":
            return {rid: min(len(d.token_ids), self.max_draft_len) for rid, d in drafts.items()}
        candidates = []
        for rid, draft in drafts.items():
            if draft.calibrated and draft.confidence:
                self._estimate(rid, create=True).first = draft.confidence[0]
            for i, confidence in enumerate(draft.confidence[: self.max_draft_len]):
                gain = self.expected_gain(rid, i, confidence if draft.calibrated else None)
                if gain < MIN_GAIN:
                    break
                candidates.append((gain, i, rid))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        lengths = dict.fromkeys(drafts, 0)
        expected, tokens = float(max(num_decodes, 1)), batch_tokens
        for gain, i, rid in candidates:
            if lengths[rid] != i:  # a position counts only after the ones before it
                continue
            if not self._worth(gain, expected, tokens):
                break
            lengths[rid] = i + 1
            expected += gain
            tokens += 1
        return {rid: n for rid, n in lengths.items() if n}

    def _worth(self, gain: float, expected: float, tokens: int) -> bool:
        fit = self.step_time.fit()
        if fit is None:
            return True  # nothing measured yet: assume the latency-bound regime
        a, b = fit
        return (expected + gain) / (a + b * (tokens + 1)) > expected / (a + b * tokens)
