"""What the engine core asks of speculative decoding: drafts before a step, bookkeeping after it.

Before scheduling, each running request in decode (its last token known on the host, no logprobs)
gets a draft from the proposer, cut to the length the policy chose; the scheduler feeds it after
the request's last token and the runner verifies it (``engine.sampling.verify``). After the step the
acceptance of every draft feeds the policy and the vLLM-named counters.
"""

from __future__ import annotations

from dataclasses import replace

from engine.config import EngineConfig
from engine.scheduler.output import SchedulerOutput
from engine.scheduler.request import Request, RequestStatus
from engine.spec.policy import SpeculationPolicy
from engine.spec.proposer import Proposer


class Speculator:
    def __init__(self, proposer: Proposer, policy: SpeculationPolicy, max_batched_tokens: int) -> None:
        self.proposer = proposer
        self.policy = policy
        self.max_batched_tokens = max_batched_tokens
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.num_accepted_tokens_per_pos = [0] * policy.max_draft_len
        self._approved = False  # wants_drafts said yes this step: propose does not ask again

    @classmethod
    def _eligible(cls, request: Request) -> bool:
        """A request this step may draft for: in decode, its last token on the host, no logprobs
        wanted, and room for a draft token before ``max_tokens``."""
        return (
            request.status is RequestStatus.RUNNING
            and request.num_output_placeholders == 0
            and request.num_computed_tokens == request.num_tokens - 1
            and request.sampling_params.logprobs is None
            and cls.room(request) > 0
        )

    @staticmethod
    def room(request: Request) -> int:
        """Draft tokens a step of the request can still use: it emits at most its draft plus one
        token, and never past ``max_tokens`` (a token in flight counts as emitted)."""
        return request.max_tokens - len(request.output_token_ids) - request.num_output_placeholders - 1

    def _load(self, running: list[Request], ids: list[str] | None = None) -> tuple[int, int]:
        """The step's tokens without drafts, and how many of its requests are decodes; ``ids``
        gets the ids of the decodes that may draft once the step in flight is read."""
        tokens = decodes = 0
        for r in running:
            ahead = r.num_tokens + r.num_output_placeholders - r.num_computed_tokens
            if ahead > 0:
                tokens += ahead
            if ahead <= 1:
                decodes += 1
                if (
                    ids is not None
                    and ahead == 1
                    and r.status is RequestStatus.RUNNING
                    and r.sampling_params.logprobs is None
                    and self.room(r) > 0
                ):
                    ids.append(r.request_id)
        return min(tokens, self.max_batched_tokens), decodes

    def wants_drafts(self, running: list[Request]) -> bool:
        """Whether drafting pays at this batch (async scheduling waits for the step in flight only
        then), for the requests that will be candidates once it is read; ``propose`` goes by this
        verdict instead of asking again (one decision a step, the one that lost the overlap)."""
        ids: list[str] = []
        tokens, decodes = self._load(running, ids)
        self._approved = bool(ids) and decodes > 0 and self.policy.pays_at(tokens, decodes, ids)
        return self._approved

    def propose(self, running: list[Request]) -> None:
        """Set ``draft_token_ids`` on the running requests that speculate this step."""
        approved, self._approved = self._approved, False
        for request in running:
            request.draft_token_ids = []
        candidates = [r for r in running if self._eligible(r)]
        if not candidates:
            return
        tokens, decodes = self._load(running)
        if not approved and not self.policy.pays_at(tokens, decodes, [r.request_id for r in candidates]):
            return
        drafts = self.proposer.propose(candidates, self.policy.max_draft_len)
        for request in candidates:  # no verify work past max_tokens, and no gain counted for it
            draft, room = drafts.get(request.request_id), self.room(request)
            if draft is not None and len(draft.token_ids) > room:
                drafts[request.request_id] = replace(
                    draft, token_ids=draft.token_ids[:room], confidence=draft.confidence[:room]
                )
        lengths = self.policy.draft_lengths(drafts, tokens, decodes)
        for request in candidates:
            n = lengths.get(request.request_id, 0)
            if n:
                request.draft_token_ids = drafts[request.request_id].token_ids[:n]

    def observe(self, out: SchedulerOutput, accepted: dict[str, list[int]], seconds: float | None) -> None:
        """After a step: what it cost (None when unknown, see ``observe_time``) and every draft's
        acceptance."""
        if seconds is not None:
            self.observe_time(out, seconds)
        for s in out.scheduled:
            if not s.num_draft_tokens:
                continue
            rid = s.request.request_id
            n = len(accepted.get(rid, []))
            self.policy.record(rid, s.num_draft_tokens, n)
            self.num_drafts += 1
            self.num_draft_tokens += s.num_draft_tokens
            self.num_accepted_tokens += n
            for i in range(n):
                self.num_accepted_tokens_per_pos[i] += 1

    def observe_time(self, out: SchedulerOutput, seconds: float) -> None:
        """What a step cost the engine in wall-clock time: an overlapped step the interval between
        two completions; a synchronous one (every verify step) from the moment the step before it
        was read to the moment its own outputs were processed, the host work around it included,
        which no other step hides (at batch 128 on the H200 a verify step of 256 rows cost 2.1x a
        plain step that way, its forward alone far less)."""
        # Only decode steps (with or without drafts) price a draft token: a prefill chunk of
        # thousands of tokens runs at GEMM efficiency and, far from the decode sizes, would pull
        # the fitted slope down to its per-token cost and make drafts look cheap.
        # Steps with drafts price a verify step, steps without a plain one (graphed, overlapped).
        if all(s.num_tokens - s.num_draft_tokens == 1 for s in out.scheduled):
            tokens = out.total_num_tokens
            model = self.policy.verify_model(tokens) if out.num_draft_tokens else self.policy.plain_step_time
            model.observe(self.policy.padded(tokens), seconds)

    def drop(self, request_id: str) -> None:
        self.proposer.drop(request_id)
        self.policy.forget(request_id)


class PlainStepObserver(Speculator):
    """Speculation off, its plain-step model fed: never drafts (no proposer runs, async steps stay
    overlapped) but observes every plain decode step into ``policy.plain_step_time``, so that a
    speculator attached later, sharing the models, can weigh drafting against plain steps at once
    instead of first spending its own steps measuring them (``engine/bench/speculative_grid.py``)."""

    def __init__(self, policy: SpeculationPolicy, max_batched_tokens: int) -> None:
        super().__init__(None, policy, max_batched_tokens)

    def wants_drafts(self, running: list[Request]) -> bool:
        return False

    def propose(self, running: list[Request]) -> None:
        pass

    def drop(self, request_id: str) -> None:
        pass


def make_speculator(config: EngineConfig, build_proposer) -> Speculator | None:
    """None when speculation is off. ``build_proposer(method)`` builds the proposer (the engine
    knows the model, the device and the checkpoint it needs)."""
    if config.speculative_method == "off":
        return None
    policy = SpeculationPolicy(config.num_speculative_tokens, config.speculative_scheduling)
    return Speculator(build_proposer(config.speculative_method), policy, config.max_num_batched_tokens)


def verify_graph_sizes(runner) -> tuple[int, ...] | None:
    """The sizes (in tokens) of the decode graphs that replay verify steps, None when none does:
    no graphs, or a proposer that reads the verify step's hidden states (MTP), which graphs do not
    output."""
    graphs = getattr(runner, "graphs", None)
    if graphs is None or getattr(runner, "hidden_sink", None) is not None:
        return None
    return tuple(graphs.sizes)
