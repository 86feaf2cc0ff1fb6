"""Confidence-scheduled verification: how many draft tokens each request verifies this step.

Per request, draft position i is worth its expected acceptance, the probability that the first
i + 1 draft tokens are all kept, counted once (``expected_gain``): a calibrated proposer's (draft
model, MTP) cumulative confidence is that probability already; an uncalibrated one (n-gram lookup,
confidence 1.0) gets the request's running per-token acceptance to the power i + 1. Per batch, a
step of T tokens costs t(T) = a + b*T, fitted to the measured step times of sizes near T
(``StepTimeModel``). Positions are added best
first while they raise the expected emitted tokens per second, (E + g) / t(T + 1) > E / t(T): in
the latency-bound regime (b*T << a) a token costs almost nothing and whole drafts go; when the
batch is compute-bound every extra token costs its share of the step and speculation switches
itself off.

``pays_at`` decides before the drafts exist (async scheduling must know whether to wait for the
step in flight), with the same gain for each request's first position: the first-token confidence
of its last calibrated draft, else its running acceptance. A request without drafts of its own
is assumed to be accepted like the recent drafts of all requests (``_Population``). So that a
request once judged not worth drafting is not shut out for good, every decision relaxes its
evidence toward the prior of 2/3 (``RELAX`` per decision), as it does the population's rate: after
some tens of steps without drafts it is asked again. Until the first draft is verified the
acceptance is a guess, so the first plan that does not pay is a probe at once. A yes that
``draft_lengths`` then answers with no drafts costs the step its overlap, so after one ``pays_at``
leaves the requests drafted for out until the probe below is due, or, where no plan drafted at
all, for ``REASK_WAIT`` decisions. The speculator asks ``pays_at`` once per step.

That model is fitted on verify steps only (eager, multi-token, synchronous); a plain decode step
(graphed, overlapped) can cost several times less at the same batch, so a second model,
``plain_step_time``, is fitted on steps that carried no drafts. Once both give a time, drafting
also has to beat not drafting: expected emitted tokens per second with the chosen drafts,
(decodes + sum of gains) / t_verify(T + drafts), above decodes / t_plain(T). When it does not,
speculation is off except for a rare probe (``probe_interval``) that keeps the verify model
current. Until the plain model has observations the decisions are the marginal ones above.

Verify steps of up to ``graph_tokens`` tokens replay the decode CUDA graphs (one row per fed token);
longer ones run eager and cost several times more per step, a cliff no line fits. So verify steps
above that size have their own model (``eager_step_time``), and a plan is made twice: as the
marginal rule gives it, and cut at ``graph_tokens``; the one with more expected tokens per second
(each priced by its own model; an unmeasured eager plan loses to a measured graphed one) goes on to
the comparison with a plain step. ``graph_tokens`` None (no graphs: CPU, eager mode, MTP, whose
verify steps need hidden states) leaves one verify model.

A graphed step runs as many rows as the smallest captured graph that holds it (``graph_sizes``),
and its padding rows are not free: a mixture of experts routes them too, so at batch 1 a verify step
of 5 tokens pays for the 8 rows of its graph, as many expert reads as 8 real rows. Steps are
therefore priced, and observed, at their padded size (``padded``), and besides the two plans above
the planner weighs the marginal plan cut at each graph size it crosses: "3 draft tokens in the
4-row graph" against "5 in the 8-row one". A size it has stopped running is run again now and then
(``STALE_EXPLORE``), so that its price stays its own measurement.

Pure Python: no torch. It runs on the host between steps (at batch 1, synchronous with the GPU), so
the models answer from memos until their next observe, the fits' sums are updated unrolled, and a
plan sorts every request's positions once and takes them best first, noting its graph-size cuts as it goes.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from operator import itemgetter

from engine.spec.proposer import Draft

# Belief in a per-token acceptance before any draft of this engine was verified, as pseudo-counts,
# and how fast a request's evidence forgets (per drafted token).
PRIOR_ACCEPTED = 2.0
PRIOR_REJECTED = 1.0
ACCEPTANCE_DECAY = 0.9
PRIOR_RATE = PRIOR_ACCEPTED / (PRIOR_ACCEPTED + PRIOR_REJECTED)
PRIOR_WEIGHT = PRIOR_ACCEPTED + PRIOR_REJECTED
# The acceptance of the recent drafts of all requests (``_Population``) forgets by this per drafted
# token: about the last 200 tokens, a step or two of drafts at batch 64 and above.
POPULATION_DECAY = 0.995
# Per pays_at decision, a request's evidence keeps this share of its distance from the prior: from
# an acceptance of 0.2 back to a batch-256 H200 break-even of ~0.48 takes ~45 decisions.
RELAX = 0.98
# Never verify a position less likely than this to be kept, however cheap the token.
MIN_GAIN = 0.05
# Step times: forget older steps by this factor per step, and fit only once the batch sizes differ.
STEP_TIME_DECAY = 0.99
MIN_STEPS_FOR_FIT = 8
# A step size whose decayed weight falls below this (~460 steps unseen at 0.99) is dropped.
FORGOTTEN_WEIGHT = 0.01
# Local step-time fits: bins of step sizes (powers of two) this far from the size asked about count,
# each bin further away weighted by this much less.
LOCAL_SPAN = 2
LOCAL_FALLOFF = 0.5
# While the plain model says drafting does not pay, a probe (one speculating step) may cost at most
# this share of the plain steps' time: see ``probe_interval``. A third of the 3 % the scheduler may
# lose to no speculation at large batches (issue 18): at 0.03, session 23's probes alone cost
# 3.2 % and 2.8 % at acceptance 0.5 and batch 128 and 256.
PROBE_BUDGET = 0.01
# After draft_lengths plans no drafts at all from those it was offered, pays_at leaves their requests
# out for this many decisions: see ``_refuse``.
REASK_WAIT = math.ceil(1 / PROBE_BUDGET)
# Until the plain model has MIN_STEPS_FOR_FIT steps, one decision in this many runs a plain step.
PLAIN_EXPLORE = 4
# One plan in this many takes a cut at a graph size whose own mean has faded, if the plan chosen
# has one: see ``_best_plan``. Each such plan drafts less than the one chosen (at batch 1 and
# acceptance 0.8, 3 tokens for 5: a fifth fewer tokens that step), so this is its cost's bound.
STALE_EXPLORE = 32
# A graph size counts as stale for that once its decayed weight is below this (~70 steps unseen).
STALE_WEIGHT = 0.5
# Plans whose expected tokens per second are within this share of the best plan's count as equal,
# and the one of fewest tokens goes: the step-time models err by a few percent, more for longer
# steps (their host work, and the drain a batch's last requests leave, grow with the draft), so of
# equals the shorter risks less. On the H200 at acceptance 0.8 and batch 64 the models priced 3, 4
# and 5 drafts within 0.5 % of each other; measured, 3 were 2 % and 6 % faster (session 26).
TIE_TOLERANCE = 0.01


class StepTimeModel:
    """Least-squares fits t(T) = a + b*T over the recent steps (exponentially weighted): one over all
    of them, and local ones around a step size from the steps of nearby sizes (sizes binned by
    powers of two, neighbouring bins weighted ``LOCAL_FALLOFF`` per bin). A mixture-of-experts
    model's step cost is concave in T: at batch 1 each extra row reads experts no other row needed,
    at batch 128 rows mostly share experts already read; one line over both underprices the rows of
    a batch-1 verify step several times. A local fit is used where its bins hold enough steps.
    Where enough steps had exactly the size asked about (graphed steps are observed at their graph's
    size, so sizes repeat), their mean is the prediction: a graph's cost is a step in T, which no
    line through its neighbours' sizes follows."""

    def __init__(self, decay: float = STEP_TIME_DECAY) -> None:
        self.decay = decay
        self._all = [0.0] * 5  # decayed sums: weight, T, t, T*T, T*t
        self._bins: dict[int, list[float]] = {}
        self._sizes: dict[int, list[float]] = {}  # per exact size: decayed weight, sum of t
        self.steps = 0
        # Answers until the next observe: a policy asks the same few sizes many times per step.
        self._times: dict[int, float | None] = {}
        self._fits: dict[int | None, tuple[float, float] | None] = {}
        self._local: dict[int, list[float]] = {}  # per size bin: the sums ``_sums`` gives

    def observe(self, num_tokens: int, seconds: float) -> None:
        self._times.clear()
        self._fits.clear()
        self._local.clear()
        d = self.decay
        point = (1.0, num_tokens, seconds, num_tokens * num_tokens, num_tokens * seconds)
        key = _size_bin(num_tokens)
        if key not in self._bins:
            self._bins[key] = [0.0] * 5
        for sums in (self._all, *self._bins.values()):
            w, t, y, tt, ty = sums
            sums[:] = w * d, t * d, y * d, tt * d, ty * d
        for sums in (self._all, self._bins[key]):
            _add(sums, 1.0, point)
        forgotten = []
        for size, same in self._sizes.items():
            same[0] *= d
            same[1] *= d
            if same[0] < FORGOTTEN_WEIGHT:  # sizes of long ago (eager steps take any size)
                forgotten.append(size)
        for size in forgotten:
            del self._sizes[size]
        same = self._sizes.get(num_tokens)
        if same is None:
            same = self._sizes[num_tokens] = [0.0, 0.0]
        same[0] += 1.0
        same[1] += seconds
        self.steps += 1

    def fit(self, around: int | None = None) -> tuple[float, float] | None:
        """(a, b) in seconds and seconds per token, locally around a step of ``around`` tokens where
        the nearby steps allow (steps of one size there say nothing of the slope: the global line);
        None until enough steps of different sizes."""
        if self.steps < MIN_STEPS_FOR_FIT:
            return None
        fit = self._fits.get(around, _UNKNOWN)
        if fit is _UNKNOWN:
            local = _line(self._sums(around))
            fit = self._fits[around] = local if local is not None or around is None else _line(self._all)
        return fit

    def has_mean(self, num_tokens: int, weight: float = MIN_STEPS_FOR_FIT / 2) -> bool:
        """Whether recent steps of exactly this size weigh ``weight`` (by default, enough for
        ``time`` to be their mean)."""
        same = self._sizes.get(num_tokens)
        return same is not None and same[0] >= weight

    def time(self, num_tokens: int) -> float | None:
        """Predicted seconds for a step of ``num_tokens``: the fitted line around it, or, when the
        steps there had one size (batch 1 all day), their mean; None until ``MIN_STEPS_FOR_FIT`` steps."""
        if self.steps < MIN_STEPS_FOR_FIT:
            return None
        seconds = self._times.get(num_tokens)
        if seconds is None:
            seconds = self._times[num_tokens] = self._predict(num_tokens)
        return seconds

    def _predict(self, num_tokens: int) -> float:
        if self.has_mean(num_tokens):
            same = self._sizes[num_tokens]
            return same[1] / same[0]
        sums = self._sums(num_tokens)
        line = _line(sums)
        if line is None:
            return sums[2] / sums[0]
        a, b = line
        return a + b * num_tokens

    def _sums(self, around: int | None) -> list[float]:
        """The local sums around a size when they weigh at least MIN_STEPS_FOR_FIT / 2 steps, else
        the global ones."""
        if around is None:
            return self._all
        center = _size_bin(around)
        sums = self._local.get(center)
        if sums is None:
            sums = self._local[center] = self._local_sums(center)
        return sums

    def _local_sums(self, center: int) -> list[float]:
        local = [0.0] * 5
        for key, sums in self._bins.items():
            distance = abs(key - center)
            if distance <= LOCAL_SPAN:
                _add(local, _FALLOFF[distance], sums)
        return local if local[0] >= MIN_STEPS_FOR_FIT / 2 else self._all


_UNKNOWN = object()  # not yet asked since the last observe
_GAIN = itemgetter(0)  # of a position (-gain, i, chain index, key)
_FALLOFF = tuple(LOCAL_FALLOFF**distance for distance in range(LOCAL_SPAN + 1))


def _add(sums: list[float], weight: float, other) -> None:
    """sums[i] += weight * other[i] for the 5 sums of a fit, unrolled (a hot loop)."""
    w, t, y, tt, ty = sums
    ow, ot, oy, ott, oty = other
    sums[:] = w + weight * ow, t + weight * ot, y + weight * oy, tt + weight * ott, ty + weight * oty


def _size_bin(num_tokens: int) -> int:
    return max(int(num_tokens), 1).bit_length()


def _line(sums: list[float]) -> tuple[float, float] | None:
    w, t, y, tt, ty = sums
    var = tt / w - (t / w) ** 2
    if var < 1e-6:
        return None
    b = max(0.0, (ty / w - t * y / w**2) / var)
    a = max(1e-9, y / w - b * t / w)
    return a, b


class _Population:
    """What a new request's estimate starts from: the acceptance of recent drafts of all requests,
    as ``PRIOR_WEIGHT`` pseudo-counts. A new request is likelier to be accepted
    like the ones before it than like a constant: the fixed prior of 2/3 kept every new request of
    a batch-128 wave at acceptance 0.9 undrafted until a probe (H200, session 26: 196 plain steps
    of 259 there, 0.899x the best fixed length). Without new drafts the rate relaxes toward
    ``PRIOR_RATE`` by ``RELAX`` per decision, so that a population once judged not worth drafting
    is asked again as a single request is."""

    __slots__ = ("accepted", "rejected", "clock", "rate", "_at")

    def __init__(self) -> None:
        self.accepted = self.rejected = 0.0  # decayed sums of kept tokens and of rejections
        self.clock = 0  # the decision of the last draft recorded
        self.rate = PRIOR_RATE
        self._at = -1  # the decision ``rate`` was computed for (-1: stale)

    def record(self, num_drafted: int, num_accepted: int, clock: int) -> None:
        d = POPULATION_DECAY**num_drafted
        self.accepted = self.accepted * d + num_accepted
        self.rejected = self.rejected * d + (1.0 if num_accepted < num_drafted else 0.0)
        self.clock, self._at = clock, -1

    def rate_at(self, clock: int) -> float:
        if self._at != clock:
            measured = (PRIOR_ACCEPTED + self.accepted) / (PRIOR_WEIGHT + self.accepted + self.rejected)
            self.rate = PRIOR_RATE + (measured - PRIOR_RATE) * _relaxed(max(clock - self.clock, 0))
            self._at = clock
        return self.rate


@dataclass
class _Estimate:
    """A request's evidence: its drafts' kept and rejected tokens (as pseudo-counts) and the
    first-token confidence of its last calibrated draft, as of the policy's decision ``clock``."""

    accepted: float = PRIOR_ACCEPTED
    rejected: float = PRIOR_REJECTED
    first: float | None = None
    clock: int = 0
    quiet_until: int = 0  # before this decision, pays_at leaves the request out (``_refuse``)
    backoff: int = 0  # decisions it was last left out for; 0 once a draft of it is verified

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def relax(self, clock: int) -> _Estimate:
        """Fade the evidence toward the fixed prior by ``RELAX`` per decision since the last update
        (toward 2/3, not the population's rate: relaxing a lone request toward a population made of
        its own drafts would never bring it back to be asked again)."""
        if clock <= self.clock:
            return self
        f = _relaxed(clock - self.clock)
        self.accepted = PRIOR_ACCEPTED + (self.accepted - PRIOR_ACCEPTED) * f
        self.rejected = PRIOR_REJECTED + (self.rejected - PRIOR_REJECTED) * f
        if self.first is not None:
            self.first = PRIOR_RATE + (self.first - PRIOR_RATE) * f
        self.clock = clock
        return self


def _positions(chains: dict) -> list[tuple]:
    """Every chain's positions that may count, as (-gain, position, chain index, key), best first
    (see ``SpeculationPolicy._plan``). Listed position by position, chain by chain, so that a
    stable sort on the gain alone leaves ties in (position, chain) order, as sorting the tuples
    would, at a fraction of the comparisons (drafts of like confidence are sorted already)."""
    prefixes = []
    most = 0
    for key, gains in chains.items():
        previous, counted = math.inf, 0
        for gain in gains:
            if gain < MIN_GAIN or gain > previous:
                break
            previous = gain
            counted += 1
        prefixes.append((key, gains, counted))
        if counted > most:
            most = counted
    order = []
    append = order.append
    for i in range(most):
        for index, (key, gains, counted) in enumerate(prefixes):
            if counted > i:
                append((-gains[i], i, index, key))
    order.sort(key=_GAIN)
    return order


class _Prefix:
    """The lengths of a plan's first ``count`` positions taken, made into a dict only for the plan
    chosen: a plan crossing many graph sizes would otherwise copy its lengths at every one.
    ``taken``: (key, length) in the order taken, or (``ordered``) a plan's sorted positions, of
    which it took a prefix."""

    __slots__ = ("taken", "count", "ordered")

    def __init__(self, taken: list, count: int, ordered: bool = False) -> None:
        self.taken, self.count, self.ordered = taken, count, ordered

    def __bool__(self) -> bool:
        return self.count > 0

    def lengths(self) -> dict:
        if self.ordered:
            return {key: i + 1 for _, i, _, key in self.taken[: self.count]}
        return dict(self.taken[: self.count])


_RELAX_POWERS = [RELAX**k for k in range(64)]  # the relaxations of the commonest gaps, as ** gives them


def _relaxed(decisions: int) -> float:
    return _RELAX_POWERS[decisions] if decisions < 64 else RELAX**decisions


class SpeculationPolicy:
    def __init__(
        self,
        max_draft_len: int,
        scheduling: str = "confidence",
        step_time: StepTimeModel | None = None,
        plain_step_time: StepTimeModel | None = None,
        eager_step_time: StepTimeModel | None = None,
        graph_sizes: tuple[int, ...] | None = None,
    ):
        self.max_draft_len = max_draft_len
        self.scheduling = scheduling
        self.step_time = step_time or StepTimeModel()  # verify steps (with drafts), graphed
        self.plain_step_time = plain_step_time or StepTimeModel()  # decode steps without drafts
        self.eager_step_time = eager_step_time or StepTimeModel()  # verify steps too long for graphs
        self.graph_sizes: tuple[int, ...] | None = None  # the captured sizes, ascending (None: no graphs)
        self.use_graphs(graph_sizes)
        self._estimates: dict[str, _Estimate] = {}
        self._population = _Population()
        self._clock = 0  # pays_at decisions so far
        # pays_at decisions since drafts were last handed out; none yet, so the first plan that
        # does not pay is a probe at once: until some draft is verified the acceptance is a guess.
        self._since_verify = math.inf
        self._plans = 0  # draft_lengths plans so far

    def prior(self) -> float:
        """The acceptance a request without drafts of its own is assumed to have (``_Population``)."""
        return self._population.rate_at(self._clock)

    def _estimate(self, request_id: str, create: bool = False) -> _Estimate:
        estimate = self._estimates.get(request_id)
        if estimate is None:
            accepted = PRIOR_WEIGHT * self.prior()
            estimate = _Estimate(accepted, PRIOR_WEIGHT - accepted, clock=self._clock)
            if create:
                self._estimates[request_id] = estimate
            return estimate
        return estimate.relax(self._clock)

    def _first_gains(self, request_ids) -> dict[float, int]:
        """How many of the requests have each first-position gain (``pays_at``'s)."""
        counts: dict[float, int] = {}
        estimates, clock = self._estimates, self._clock
        prior = self.prior()
        for rid in request_ids:
            estimate = estimates.get(rid)
            if estimate is None:
                gain = prior
            else:
                if estimate.quiet_until > clock:
                    continue
                if estimate.clock < clock:
                    estimate.relax(clock)
                gain = estimate.first
                if gain is None:
                    gain = estimate.accepted / (estimate.accepted + estimate.rejected)
            counts[gain] = counts.get(gain, 0) + 1
        return counts

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
        a = self._estimates.get(request_id)
        if a is None:
            a = self._estimate(request_id, create=True)
        elif a.clock < self._clock:
            a.relax(self._clock)
        a.backoff = 0
        self._population.record(num_drafted, num_accepted, self._clock)
        d = ACCEPTANCE_DECAY**num_drafted
        a.accepted = a.accepted * d + num_accepted
        a.rejected = a.rejected * d + (1.0 if num_accepted < num_drafted else 0.0)

    def use_graphs(self, sizes) -> None:
        """The runner's captured decode-graph sizes (empty or None: no graphs)."""
        self.graph_sizes = tuple(sorted(sizes)) if sizes else None
        self._graph_tokens = self.graph_sizes[-1] if self.graph_sizes else None
        # padded(n) for every n the graphs hold
        self._rows = (
            tuple(self.graph_sizes[bisect_left(self.graph_sizes, n)] for n in range(self._graph_tokens + 1))
            if self.graph_sizes
            else ()
        )

    @property
    def graph_tokens(self) -> int | None:
        """The longest verify step the graphs run (None: no graphs)."""
        return self._graph_tokens

    def padded(self, num_tokens: int) -> int:
        """The rows a step of ``num_tokens`` runs: the smallest captured graph size that holds them,
        or the tokens themselves past the graphs (or with their sizes unknown)."""
        rows = self._rows
        return rows[num_tokens] if 0 <= num_tokens < len(rows) else num_tokens

    def verify_time(self, num_tokens: int) -> float | None:
        if self._graph_tokens is None:
            return self.step_time.time(num_tokens)
        if num_tokens > self._graph_tokens:
            return self.eager_step_time.time(num_tokens)
        return self.step_time.time(self._rows[max(num_tokens, 0)])

    def plain_time(self, num_tokens: int) -> float | None:
        return self.plain_step_time.time(self.padded(num_tokens))

    def verify_model(self, num_tokens: int) -> StepTimeModel:
        """The model that prices a verify step of ``num_tokens``: graphed, or eager past the graphs."""
        if self._graph_tokens is not None and num_tokens > self._graph_tokens:
            return self.eager_step_time
        return self.step_time

    def forget(self, request_id: str) -> None:
        self._estimates.pop(request_id, None)

    def pays_at(self, batch_tokens: int, num_decodes: int, request_ids) -> bool:
        """Whether the first draft token of the likeliest request would raise throughput at this
        batch, by the gain ``draft_lengths`` would give it; when not, speculation is off for the step."""
        if self.scheduling == "fixed":
            return True
        self._clock += 1
        self._since_verify += 1
        gains = self._first_gains(request_ids)
        best = max(gains, default=0.0)
        if best < MIN_GAIN or not self._worth(best, float(max(num_decodes, 1)), batch_tokens):
            return False
        if self.plain_time(batch_tokens) is None:
            # No plain step measured yet: every PLAIN_EXPLORE-th step goes without drafts, so the
            # comparison below gets its plain model even while the marginal rule drafts every step.
            return self._clock % PLAIN_EXPLORE != 0
        # Each request's later positions priced like its first, as an uncalibrated draft would be.
        chains = {g: [g ** (i + 1) for i in range(self.max_draft_len)] for g in gains}
        plan = self._best_plan(chains, batch_tokens, num_decodes, counts=gains)
        if plan is None:
            return False
        _, expected, tokens = plan
        return self._since_verify >= self._probe_wait(expected, tokens, batch_tokens, num_decodes)

    def draft_lengths(self, drafts: dict[str, Draft], batch_tokens: int, num_decodes: int) -> dict[str, int]:
        """How many tokens of each draft to verify, given the step's other ``batch_tokens`` tokens
        of which ``num_decodes`` emit a token each."""
        if self.scheduling == "fixed":
            return {rid: min(len(d.token_ids), self.max_draft_len) for rid, d in drafts.items()}
        chains = {}
        most = self.max_draft_len
        estimates, clock = self._estimates, self._clock
        for rid, draft in drafts.items():
            confidence = draft.confidence
            if len(confidence) > most:
                confidence = confidence[:most]
            if not draft.calibrated:
                rate = self.acceptance(rid)
                chains[rid] = [rate ** (i + 1) for i in range(len(confidence))]
                continue
            if confidence:
                estimate = estimates.get(rid)
                if estimate is None:
                    estimate = self._estimate(rid, create=True)
                elif estimate.clock < clock:
                    estimate.relax(clock)
                estimate.first = confidence[0]
            chains[rid] = confidence
        self._plans += 1
        plan = self._best_plan(chains, batch_tokens, num_decodes, explore=self._plans % STALE_EXPLORE == 0)
        if plan is None:
            return self._refuse(chains, REASK_WAIT)
        lengths, expected, tokens = plan
        wait = self._probe_wait(expected, tokens, batch_tokens, num_decodes)
        if self._since_verify < wait:
            return self._refuse(chains, min(wait - self._since_verify, REASK_WAIT))
        # (past a wait, a probe: these drafts are verified so that the verify model stays current)
        self._since_verify = 0
        return lengths

    def _refuse(self, chains: dict, decisions: int) -> dict[str, int]:
        """No drafts this step, though some were offered: pays_at approved them on evidence relaxed
        toward the prior, the proposer's confidence did not. pays_at leaves these requests out for
        a while, as asking again costs a step its overlap under async scheduling (requests it has
        not asked about still count): 1 decision, doubled at each refusal until a draft of the
        request is verified, at most ``decisions`` (until the probe is due, or ``REASK_WAIT``). A
        draft model's confidence changes token by token, so one refusal says little of the next
        draft; refusal after refusal, as at a steady low acceptance, comes down to one in
        ``REASK_WAIT`` decisions per request: under the probe's budget even if the overlap were a
        whole step."""
        for rid, chain in chains.items():
            if chain:
                estimate = self._estimate(rid, create=True)
                estimate.backoff = min(2 * estimate.backoff or 1, REASK_WAIT)
                estimate.quiet_until = self._clock + min(estimate.backoff, decisions)
        return {}

    def _best_plan(
        self,
        chains: dict,
        batch_tokens: int,
        num_decodes: int,
        counts: dict | None = None,
        explore: bool = False,
    ):
        """The marginal plan, or, when one promises more tokens per second (or the marginal plan is
        unmeasured), the one cut to what the graphs run or the marginal plan cut at a graph size it
        crosses; None when none drafts anything.

        ``explore``: a cut at a graph size that recent steps no longer had (``STALE_WEIGHT``) goes
        instead, when the plan chosen is priced by its own size's mean. Once a policy settles on one graph size it
        sees only that size, and another size's mean fades; priced then from the steps near it,
        all of one size, it costs what the chosen size costs (at batch 1, the 4-row graph as much as
        the 8-row one), and the cheaper cut would never be taken again to correct it."""
        lengths, expected, tokens, cuts = self._plan(chains, batch_tokens, num_decodes, counts)
        plans = [(lengths, expected, tokens)]
        graph_tokens = self._graph_tokens
        if graph_tokens is not None and tokens > graph_tokens:
            if counts is None and cuts and cuts[-1][2] == graph_tokens:
                # A token a position: cut to what the graphs run, the plan stops where this cut did.
                within, expected_within, _ = cuts[-1]
                within = within.lengths()
                within = {key: within[key] for key in chains if key in within}
                plans.append((within, expected_within, graph_tokens))
            else:
                plans.append(self._plan(chains, batch_tokens, num_decodes, counts, graph_tokens)[:3])
        plans += cuts
        plans = [plan for plan in plans if plan[0]]
        if len(plans) < 2:
            if plans and isinstance(plans[0][0], _Prefix):
                return (plans[0][0].lengths(), *plans[0][1:])
            return plans[0] if plans else None
        # The marginal plan, or a measured one with a higher rate; of the measured plans within
        # TIE_TOLERANCE of the best rate, the one of fewest tokens.
        rates = [self._rate(plan) for plan in plans]
        best, best_rate = plans[0], rates[0]
        for plan, rate in zip(plans[1:], rates[1:], strict=True):
            if rate >= 0 and rate > best_rate:
                best, best_rate = plan, rate
        if best_rate > 0:
            floor = best_rate * (1.0 - TIE_TOLERANCE)
            best = min(
                (plan for plan, rate in zip(plans, rates, strict=True) if rate >= floor),
                key=lambda plan: plan[2],
            )
        if explore and self.step_time.has_mean(self.padded(best[2])):
            stale = [
                plan
                for plan in plans
                if plan is not best
                and self.verify_model(plan[2]) is self.step_time
                and not self.step_time.has_mean(self.padded(plan[2]), STALE_WEIGHT)
            ]
            if stale:
                best = max(stale, key=lambda plan: plan[1])
        if isinstance(best[0], _Prefix):
            best = (best[0].lengths(), *best[1:])
        return best

    def _rate(self, plan) -> float:
        """A plan's expected emitted tokens per second, -1 while its verify step is unpriced."""
        seconds = self.verify_time(plan[2])
        return -1.0 if seconds is None else plan[1] / seconds

    def _plan(
        self,
        chains: dict,
        batch_tokens: int,
        num_decodes: int,
        counts: dict | None = None,
        max_tokens: int | None = None,
    ):
        """Draft positions added best first while each raises expected tokens per verify-step
        time (and, with ``max_tokens``, while the step stays within it): the lengths, the step's
        expected emitted tokens, its tokens, and (without ``max_tokens``) its cuts at the graph
        sizes it crosses, each the plan as it stood before the position that took it past one.
        ``counts[key]`` requests share the chain ``chains[key]`` (so ``pays_at`` prices a batch of
        equal estimates once); the lengths are per request only without ``counts``.

        Best first is by gain, then position, then chain order; a position counts only after the
        ones before it, and a chain ends at its first position below ``MIN_GAIN`` or above the one
        before it. Within that prefix a chain's gains do not increase, so every position sorts after
        its predecessor: one sort of all positions gives the order in which they may count."""
        order = _positions(chains)
        fit = self.step_time.fit(around=batch_tokens)
        a, b = fit or (0.0, 0.0)
        limit, rows = (math.inf, self._rows) if max_tokens is None else (max_tokens, ())
        cuts = []
        expected, tokens = float(max(num_decodes, 1)), batch_tokens
        if counts is None:
            tokens, expected, count = self._take_runs(order, fit, a, b, limit, rows, tokens, expected, cuts)
            lengths = {key: i + 1 for _, i, _, key in order[:count]}
        else:
            lengths = {}
            tokens, expected = self._take_each(order, fit, a, b, limit, rows, tokens, expected, counts, lengths, cuts)
        if len(lengths) > 1:  # in the chains' order, as callers iterate them
            lengths = {key: lengths[key] for key in chains if key in lengths}
        return lengths, expected, tokens, cuts

    @staticmethod
    def _take_each(order, fit, a, b, limit, rows, tokens, expected, counts, lengths, cuts):
        """``_plan``'s positions one by one (``counts``: a position adds its chain's requests)."""
        taken = []
        skipped = set()  # chains with a position that did not fit: their later ones cannot count
        for gain, i, _, key in order:
            gain = -gain
            # (E + g) / t(T + 1) > E / t(T) for t = a + b*T is g*t(T) > E*b, which adding more
            # tokens of the same gain leaves as it is: a chain's requests all go, or none.
            if fit is not None and not gain * (a + b * tokens) > expected * b:
                break
            if key in skipped:
                continue
            n = counts[key]
            if tokens + n > limit:
                skipped.add(key)
                continue
            if lengths and tokens < len(rows) and rows[tokens] < tokens + n:
                # rows[tokens]: the graph it leaves; the lengths so far, made only if chosen
                cuts.append((_Prefix(taken, len(taken)), expected, tokens))
            lengths[key] = i + 1
            taken.append((key, i + 1))
            expected += gain * n
            tokens += n
            if tokens >= limit:
                break  # every position adds a token at least: none fits any more
        return tokens, expected

    def _take_runs(self, order, fit, a, b, limit, rows, tokens, expected, cuts):
        """``_plan``'s positions a token each, a run of equal gains at a time: the marginal rule
        holds for all of a run or none of it (see ``_take_each``), and the run's cuts are the graph
        sizes it reaches, so a batch of like drafts costs a sort and a few steps, not a loop per
        position. The positions taken are always a prefix of ``order``: the step's tokens, expected
        tokens, and how many of ``order`` it took."""
        sizes = self.graph_sizes if rows else ()  # no cuts under a token limit
        start, end_of_order = 0, len(order)
        while start < end_of_order:
            first = order[start][0]
            gain = -first
            if fit is not None and not gain * (a + b * tokens) > expected * b:
                break
            end = start + 1
            if end < end_of_order and order[end][0] == first:  # a run: its end by bisection
                end = bisect_right(order, first, end + 1, end_of_order, key=_GAIN)
            if end - start == 1:  # a run of one (drafts of unlike confidence): as _take_each does
                if tokens + 1 > limit:
                    break
                if start and tokens < len(rows) and rows[tokens] == tokens:
                    cuts.append((_Prefix(order, start, ordered=True), expected, tokens))
                expected += gain
                tokens += 1
                start = end
                continue
            run = min(end - start, limit - tokens)
            if run <= 0:
                break
            # A cut before each position that would leave a graph: at every graph size s the run
            # reaches (tokens <= s < tokens + run), once some position is taken.
            index = bisect_left(sizes, tokens)
            while index < len(sizes) and sizes[index] < tokens + run:
                size = sizes[index]
                done = size - tokens
                if start or done:
                    cuts.append((_Prefix(order, start + done, ordered=True), expected + gain * done, size))
                index += 1
            expected += gain * run
            tokens += run
            start += run
            if tokens >= limit:
                break  # every position adds a token: none fits any more
        return tokens, expected, start

    def _probe_wait(self, expected: float, tokens: int, batch_tokens: int, num_decodes: int) -> int:
        """0 when a verify step of ``tokens`` emitting ``expected`` tokens beats a plain step of the
        batch in tokens per second (or either is not priced yet), else the probe interval."""
        plain = self.plain_time(batch_tokens)
        verify = self.verify_time(tokens)
        if plain is None or verify is None or expected / verify > max(num_decodes, 1) / plain:
            return 0
        return self.probe_interval(verify, plain)

    @staticmethod
    def probe_interval(verify_seconds: float, plain_seconds: float) -> int:
        """Plain steps between two probes while speculation is off. A probe replaces one plain step
        by a verify step, costing at most their difference (its accepted tokens only make it
        cheaper); spread over N plain steps that is (verify - plain) / (N * plain), so N is the
        smallest integer keeping it strictly under ``PROBE_BUDGET``. The H200 figures (verify 18-32 ms,
        plain 4.3 ms at batch 1) give N of ~330-650, a probe every 1.5-3 s of decoding."""
        cost = max(verify_seconds - plain_seconds, 0.0)
        return math.floor(cost / (PROBE_BUDGET * plain_seconds)) + 1

    def _worth(self, gain: float, expected: float, tokens: int) -> bool:
        fit = self.step_time.fit(around=tokens)
        if fit is None:
            return True  # nothing measured yet: assume the latency-bound regime
        a, b = fit
        return (expected + gain) / (a + b * (tokens + 1)) > expected / (a + b * tokens)
