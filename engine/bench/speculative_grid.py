"""``chassis bench speculative --grid``: output tokens per second against the draft acceptance rate
and the batch size, for no speculation, each fixed draft length and the confidence scheduler.

One engine serves the whole grid: its speculator is swapped per mode (none; fixed length k; the
confidence scheduler with the longest k as its maximum). Drafts come from the oracle proposer
(``engine/spec/oracle.py``), which drafts at every step with the calibrated confidence p ** (i + 1),
and the runner's ``acceptance_override`` (``engine/spec/forced_acceptance.py``) accepts each draft
position with probability p, up to the first rejection: the verification's GPU work is the real
one, only its accept/reject decision is forced, so the acceptance is p whatever the numerics (bf16
near-ties made real verification of recorded greedy tokens leave the recording after a few tokens).
Outputs are therefore not the greedy ones; each mode reports its measured acceptance (accepted /
drafted tokens) instead. Prompts are random token ids of 32-128 tokens, already in
the prefix cache when timed, and every request generates the same number of tokens, so decoding
dominates. The modes share one set of step-time models, as the engine's one speculator would
over a server's lifetime; the scheduler runs after the fixed lengths at each point. Mode "off"
keeps a ``PlainStepObserver`` attached (``engine/spec/speculator.py``): it never drafts (no proposer
runs, steps stay overlapped) but records its plain decode steps into the shared plain-step model, as
a server's speculator sees every plain step, so the scheduler can compare drafting with plain
steps of its batch from its first step instead of measuring them first (every PLAIN_EXPLORE-th
step until MIN_STEPS_FOR_FIT of them, most of a 64-token run at batch 256).

At batch 1 a mode's run of 64 tokens is a dozen verify steps, so how many drafts the forced
acceptance happens to keep moves its rate by several percent, more than the 5 % the scheduler is
held to. ``--rounds N`` runs every mode of a point N times, the modes alternating within each round
and each round drawing its acceptances from its own seed, and reports each mode's tokens and seconds
pooled over the rounds.

``--waves W`` (default 1) measures each batch size as a serving engine runs it, at a concurrency: a
mode's run submits W times the batch's requests and admits at most the batch size at once, so a
finished request's slot is taken by the next one. With one wave the batch drains at its end: under
speculation the requests finish at different steps, and the run ends with a tail of steps over
the few slowest, where no request waits to take the freed slots (the fixed lengths at batch 128 in
session 23 ran 18.5 verify steps per 64 tokens at acceptance 0.9, where the mean draft emits 4.7
tokens a step: 13.4 steps). More waves leave that tail to the last wave alone.

The three goals of issue 18 are checked at the end: the scheduler within 5 % of the best fixed
length at every point, at least 1.8x no speculation at batch 1 and acceptance 0.8, and at most 3 %
slower than no speculation at batch 128 and above. ``--time-budget`` runs those anchor points first
and skips any point that would not finish inside the budget (counted from the start, model build
included).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.bench.interleaved import alternate
from engine.core.gc_heap import collect_when_idle, startup_heap_frozen
from engine.spec.speculator import Speculator  # light: no torch (the parser imports this module)

PROMPT_LENS = (32, 128)
ANCHOR_ACCEPTANCE = 0.8
LARGE_BATCH = 128
# The goals: scheduler / best fixed, scheduler / off at batch 1 and acceptance 0.8, at large batches.
MIN_VS_BEST_FIXED = 0.95
MIN_SPEEDUP_BATCH_1 = 1.8
MIN_VS_OFF_LARGE_BATCH = 0.97
WARM_UP_TOKENS = 8
MAX_ROUNDS_FACTOR = 4  # --min-seconds adds rounds up to this many times --rounds
SCHEDULER = "scheduler"
HEADER = (
    f"{'acc':>5}{'batch':>6}{'off':>9}{{fixed}}{'sched':>9}{'best':>6}{'s/best':>9}{'s/off':>9}"
    f"{'k.p':>7}{'s.p':>7}{'s.len':>7}{'s.nodraft':>10}{'graphed':>12}{'s.host':>8}{'gc':>6}"
)


@dataclass
class ModeResult:
    tokens_per_s: float
    seconds: float
    output_tokens: int = 0
    rounds: int = 1
    acceptance_rate: float | None = None  # accepted / drafted tokens
    # accepted / decided draft positions (a draft's positions up to its first rejection): the
    # per-position acceptance, p when it is forced to p, whatever the draft lengths
    position_acceptance: float | None = None
    mean_draft_len: float | None = None  # verified draft tokens per draft
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    decided_tokens: int = 0
    # Steps the speculator was asked to draft for (synchronous steps under async scheduling), and
    # of those the ones where no request got a draft: host work the overlap would have hidden.
    drafting_steps: int = 0
    steps_without_drafts: int = 0
    # Steps that verified drafts, and of those the ones replayed from the decode CUDA graphs (the
    # rest ran eager: more rows than the largest captured size, prompt chunks, no graphs captured).
    verify_steps: int = 0
    graphed_verify_steps: int = 0
    # Host time inside the run: the speculator's (deciding, proposing, recording) and the garbage
    # collector's pauses; either is time the GPU may wait for.
    speculator_seconds: float = 0.0
    gc_seconds: float = 0.0
    gc_full_collections: int = 0  # of them, full (generation 2) collections
    gc_full_seconds: float = 0.0
    # --trace-steps: each step the speculator saw, as [tokens, draft tokens, requests, wall ms, the
    # policy's predicted ms for that step before it was observed (verify model for a step with drafts,
    # plain model otherwise; None while unpriced)], rounds one after another
    steps: list[list] | None = None


_COUNTS = (
    "drafted_tokens", "accepted_tokens", "decided_tokens", "drafting_steps", "steps_without_drafts",
    "verify_steps", "graphed_verify_steps", "speculator_seconds", "gc_seconds", "gc_full_collections",
    "gc_full_seconds",
)  # fmt: skip


def pooled(results: list[ModeResult]) -> ModeResult:
    """One mode's rounds as one run: tokens, seconds and counts summed, rates from the sums."""
    tokens, seconds = sum(r.output_tokens for r in results), sum(r.seconds for r in results)
    total = ModeResult(tokens / seconds, seconds, tokens, len(results))
    for name in _COUNTS:
        setattr(total, name, sum(getattr(r, name) for r in results))
    if any(r.steps is not None for r in results):
        total.steps = [step for r in results for step in (r.steps or [])]
    if results[0].acceptance_rate is not None or total.drafted_tokens:
        drafts = sum(r.drafted_tokens / r.mean_draft_len for r in results if r.mean_draft_len)
        total.acceptance_rate = total.accepted_tokens / total.drafted_tokens if total.drafted_tokens else None
        total.mean_draft_len = total.drafted_tokens / drafts if drafts else None
        total.position_acceptance = (
            total.accepted_tokens / total.decided_tokens if total.decided_tokens else None
        )
    return total


@dataclass
class Point:
    acceptance: float
    batch_size: int
    modes: dict[str, ModeResult]
    best_fixed: str = ""
    scheduler_vs_best_fixed: float = 0.0
    scheduler_vs_off: float = 0.0
    fixed_acceptance: float | None = None  # per-position acceptance over every fixed length
    profiles: dict[str, dict] = field(default_factory=dict)  # --profile-point: per mode (grid_profile)

    def __post_init__(self) -> None:
        fixed = {m: r for m, r in self.modes.items() if m.startswith("k")}
        self.best_fixed = max(fixed, key=lambda m: fixed[m].tokens_per_s)
        scheduler = self.modes[SCHEDULER].tokens_per_s
        self.scheduler_vs_best_fixed = scheduler / fixed[self.best_fixed].tokens_per_s
        self.scheduler_vs_off = scheduler / self.modes["off"].tokens_per_s
        decided = sum(r.decided_tokens for r in fixed.values())
        if decided:
            self.fixed_acceptance = sum(r.accepted_tokens for r in fixed.values()) / decided


@dataclass
class Goal:
    name: str
    passed: bool | None  # None: none of its points ran
    detail: str


@dataclass
class GridReport:
    model: str
    device: str
    dtype: str
    max_tokens: int
    draft_lengths: list[int]
    oracle_confidence: str
    rounds: int = 1
    min_seconds: float = 0.0  # --min-seconds: a point's modes ran more rounds until each ran this long
    waves: int = 1
    points: list[Point] = field(default_factory=list)
    skipped: list[tuple[float, int]] = field(default_factory=list)  # (acceptance, batch) over budget
    goals: list[Goal] = field(default_factory=list)
    build_s: float = 0.0
    elapsed_s: float = 0.0


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.spec.oracle import CONFIDENCE  # light: no torch

    parser.add_argument(
        "--grid",
        action="store_true",
        help="tok/s vs acceptance rate and batch size for off, fixed draft lengths and the scheduler, "
        "with an oracle draft source of known acceptance (the arguments below)",
    )
    parser.add_argument(
        "--random-arch",
        default=None,
        help="--grid: a published architecture with random weights, e.g. llama-3.1-8b",
    )
    parser.add_argument(
        "--acceptance",
        type=float,
        nargs="+",
        default=[0.2, 0.5, 0.8, 0.9],
        help="--grid: the per-token acceptance rates the verification is forced to (default: %(default)s)",
    )
    parser.add_argument(
        "--draft-lengths",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4, 5],
        help="--grid: fixed draft lengths; the scheduler's maximum is the longest (default: %(default)s)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="--grid: skip points that would end past this many seconds from the start (model build "
        "included); the goals' anchor points run first (default: no limit)",
    )
    parser.add_argument(
        "--oracle-confidence",
        default=CONFIDENCE[0],
        choices=CONFIDENCE,
        help="--grid: the confidence the oracle reports: calibrated (p ** (i + 1), as a draft model's "
        "probabilities) or none (1.0, as n-gram lookup) (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="--grid: prompts and oracle seed (default: %(default)s)"
    )
    parser.add_argument(
        "--waves",
        type=int,
        default=1,
        help="--grid: each mode's run submits this many times the batch's requests, at most the batch "
        "size running at once (a finished request's slot goes to the next) (default: %(default)s)",
    )
    parser.add_argument(
        "--trace-steps",
        action="store_true",
        help="--grid: every mode's steps in the JSON (tokens, drafts, requests, wall and predicted ms)",
    )
    parser.add_argument(
        "--profile-point",
        action="append",
        default=[],
        metavar="ACC:BATCH",
        help="--grid, repeatable: after that point's timed rounds, run its off, best fixed and scheduler modes "
        "once more under torch.profiler and print where the device waited for the host (grid_profile)",
    )
    parser.add_argument(
        "--profile-dir",
        type=Path,
        default=None,
        help="--grid: keep the --profile-point traces here (default: not kept)",
    )
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help=f"--grid: after --rounds, more alternating rounds of a point (up to {MAX_ROUNDS_FACTOR}x "
        "--rounds) until every mode's pooled run time reaches this; small batches' short runs are the "
        "noisiest (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="--grid: runs of every mode per point, alternating, round r drawing acceptances from seed + r; "
        "each mode's figures pool its rounds (default: %(default)s)",
    )


def ordered_points(acceptances: list[float], batch_sizes: list[int]) -> list[tuple[float, int]]:
    """Every (acceptance, batch size); the goals' anchors first: acceptance 0.8 at the smallest
    batch, then batches of 128 and more, then the rest in grid order."""
    grid = [(a, b) for a in acceptances for b in sorted(batch_sizes)]
    anchor = min(grid, key=lambda p: (abs(p[0] - ANCHOR_ACCEPTANCE), p[1]))
    large = sorted((p for p in grid if p[1] >= LARGE_BATCH and p != anchor), key=lambda p: (p[1], p[0]))
    rest = [p for p in grid if p != anchor and p not in large]
    return [anchor, *large, *rest]


def estimate_s(durations: dict[int, float], batch_size: int) -> float:
    """A point's expected seconds: the last one at this batch size, else the nearest larger batch's,
    else the largest smaller one's times the square root of the batch ratio (a decode step costs
    far less than linearly more with the batch: linear scaling from batch 1 would skip batch 128);
    0 before any point ran."""
    if batch_size in durations:
        return durations[batch_size]
    larger = [b for b in durations if b > batch_size]
    if larger:
        return durations[min(larger)]
    if durations:
        b = max(durations)
        return durations[b] * (batch_size / b) ** 0.5
    return 0.0


def random_prompts(n: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab_size) for _ in range(rng.randint(*PROMPT_LENS))] for _ in range(n)]


class GcPauses:
    """Seconds the garbage collector paused the process inside the block, and its collections per
    generation (0, 1, 2: a full one walks every object not frozen)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self.full_seconds = 0.0
        self._began = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        seconds = time.perf_counter() - self._began
        self.seconds += seconds
        self.collections[info["generation"]] += 1
        if info["generation"] == 2:
            self.full_seconds += seconds

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)


class CountingSpeculator(Speculator):
    """Counts the steps it drafts for (some request is in decode), those where no request got a draft, the steps that
    verified drafts, and the draft positions that were decided (accepted, or the first rejected one of a draft);
    times its own host work."""

    steps = steps_without_drafts = decided = verify_steps = 0
    seconds = 0.0

    def wants_drafts(self, running) -> bool:
        started = time.perf_counter()
        try:
            return super().wants_drafts(running)
        finally:
            self.seconds += time.perf_counter() - started

    def propose(self, running) -> None:
        started = time.perf_counter()
        eligible = any(self._eligible(r) for r in running)  # before: drafting changes a request's state
        super().propose(running)
        if eligible:  # a step of prefills only (synchronous scheduling asks at every step) is not one
            self.steps += 1
            self.steps_without_drafts += not any(r.draft_token_ids for r in running)
        self.seconds += time.perf_counter() - started

    def observe(self, out, accepted, seconds) -> None:
        started = time.perf_counter()
        super().observe(out, accepted, seconds)
        self.verify_steps += out.num_draft_tokens > 0
        for s in out.scheduled:
            if s.num_draft_tokens:
                n = len(accepted.get(s.request.request_id, []))
                self.decided += n + (n < s.num_draft_tokens)
        self.seconds += time.perf_counter() - started


class GridRunner:
    """One engine; runs a batch in one mode and says how fast, and how many drafts were accepted."""

    def __init__(self, llm, args: argparse.Namespace) -> None:
        from engine.sampling.params import SamplingParams

        self.llm = llm
        self.args = args
        self.vocab_size = llm.engine.model_config.vocab_size
        # Shared by the speculating modes, as one engine's would be: verify (graphed), plain, eager verify.
        self.models = fresh_models()
        self.params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)

    def _attach(self, mode: str, acceptance: float, models, seed: int = 0) -> None:
        from engine.spec.forced_acceptance import ForcedAcceptance
        from engine.spec.oracle import OracleProposer
        from engine.spec.policy import SpeculationPolicy
        from engine.spec.speculator import PlainStepObserver, verify_graph_sizes

        core = self.llm.engine
        core.runner.acceptance_override = None
        if mode == "off":
            policy = SpeculationPolicy(max(self.args.draft_lengths), "confidence", *models)
            policy.use_graphs(verify_graph_sizes(core.runner))
            core.speculator = PlainStepObserver(policy, self.llm.config.max_num_batched_tokens)
            return
        if mode == SCHEDULER:
            policy = SpeculationPolicy(max(self.args.draft_lengths), "confidence", *models)
        else:
            policy = SpeculationPolicy(int(mode[1:]), "fixed", *models)
        policy.use_graphs(verify_graph_sizes(core.runner))
        proposer = OracleProposer(acceptance, self.vocab_size, seed, self.args.oracle_confidence)
        core.speculator = CountingSpeculator(proposer, policy, self.llm.config.max_num_batched_tokens)
        core.runner.acceptance_override = ForcedAcceptance(acceptance, seed)

    def run(
        self, mode: str, prompts, acceptance: float, params=None, models=None, round_: int = 0
    ) -> ModeResult:
        from engine.bench.speculative import measure

        self._attach(mode, acceptance, models or self.models, self.args.seed + round_)
        waves = getattr(self.args, "waves", 1)
        scheduler = self.llm.engine.scheduler
        concurrency = scheduler.max_num_seqs
        if waves > 1:  # the batch size as a concurrency: the next wave's requests take freed slots
            scheduler.max_num_seqs = min(len(prompts), concurrency)
            prompts = list(prompts) * waves
        graphs = self.llm.engine.runner.graphs
        graphed_before = graphs.verify_steps_run if graphs is not None else 0
        # Each run starts from idle, where a serving engine's drive loop runs the deferred full
        # collection before it waits for work: here too, not 30 s later inside some mode's run.
        collect_when_idle()
        steps = _trace_steps(self.llm.engine.speculator) if getattr(self.args, "trace_steps", False) else None
        try:
            with GcPauses() as pauses:
                tokens, seconds, counts = measure(self.llm, prompts, params or self.params)
            spec = self.llm.engine.speculator
        finally:
            self.llm.engine.speculator = self.llm.engine.runner.acceptance_override = None
            scheduler.max_num_seqs = concurrency
        emitted = sum(map(len, tokens))
        result = ModeResult(emitted / seconds, seconds, emitted, gc_seconds=pauses.seconds)
        result.gc_full_collections, result.gc_full_seconds = pauses.collections[2], pauses.full_seconds
        result.steps = steps
        if graphs is not None:
            result.graphed_verify_steps = graphs.verify_steps_run - graphed_before
        if isinstance(spec, CountingSpeculator):
            drafted, drafts = counts["spec_decode_num_draft_tokens"], counts["spec_decode_num_drafts"]
            result.drafted_tokens, result.accepted_tokens = drafted, counts["spec_decode_num_accepted_tokens"]
            result.acceptance_rate = result.accepted_tokens / drafted if drafted else None
            result.mean_draft_len = drafted / drafts if drafts else None
            result.drafting_steps, result.steps_without_drafts = spec.steps, spec.steps_without_drafts
            result.decided_tokens = spec.decided
            result.verify_steps = spec.verify_steps
            result.speculator_seconds = spec.seconds
            result.position_acceptance = result.accepted_tokens / spec.decided if spec.decided else None
        return result

    def warm_up(self, prompts: list[list[int]]) -> None:
        """Untimed: puts every prompt in the prefix cache and compiles the verification steps' kernels
        (their own step-time model, so compile time never reaches the measured one)."""
        from engine.sampling.params import SamplingParams

        short = SamplingParams(max_tokens=WARM_UP_TOKENS, temperature=0.0, ignore_eos=True)
        self.run("off", prompts, 1.0, short, fresh_models())
        if self.llm.engine.device.type != "cuda":
            return  # nothing is compiled per step shape elsewhere
        longest = max(self.args.draft_lengths)
        for k in sorted(self.args.draft_lengths):
            self.run(f"k{k}", prompts, 0.5, short, fresh_models())
        self.run(f"k{longest}", prompts[:1], 0.5, short, fresh_models())


def _trace_steps(speculator: Speculator) -> list[list]:
    """Record every step ``speculator`` observes into the list returned (``ModeResult.steps``)."""
    steps: list[list] = []
    observe_time, policy = speculator.observe_time, speculator.policy

    def traced(out, seconds: float) -> None:
        tokens = out.total_num_tokens
        if out.num_draft_tokens:
            predicted = policy.verify_time(tokens)
        else:
            predicted = policy.plain_time(tokens)
        ms = None if predicted is None else round(predicted * 1e3, 3)
        steps.append([tokens, out.num_draft_tokens, len(out.scheduled), round(seconds * 1e3, 3), ms])
        observe_time(out, seconds)

    speculator.observe_time = traced
    return steps


def fresh_models() -> tuple:
    """A policy's step-time models (verify graphed, plain, verify eager), none measured."""
    from engine.spec.policy import StepTimeModel

    return StepTimeModel(), StepTimeModel(), StepTimeModel()


def build_engine(args: argparse.Namespace, tmp: Path):
    from engine import LLM

    if args.random_arch:
        from engine.bench.random_arch import write_config_dir

        model_dir, load_format = write_config_dir(args.random_arch, tmp / args.random_arch), "dummy"
    else:
        from engine.testing.smollm2 import smollm2_path

        model_dir, load_format = (args.model or str(smollm2_path())), "auto"
    # Long enough for the engine's CUDA warm-up prompts (engine/core/warm_up.py) and every request.
    max_model_len = max(512, PROMPT_LENS[1] + args.max_tokens + max(args.draft_lengths) + 16)
    # The modes' speculators are swapped in after the build, so the graphs are sized here for the
    # longest verify step: every request of the largest batch feeding its token and the longest draft.
    verify_rows = max(args.batch_sizes) * (1 + max(args.draft_lengths))
    return LLM(
        model_dir,
        device=args.device,
        dtype=args.dtype or "auto",
        load_format=load_format,
        max_num_seqs=max(args.batch_sizes),
        max_num_batched_tokens=max(2048, verify_rows),
        max_cudagraph_capture_size=verify_rows,
        max_model_len=max_model_len,
    )


def run_grid(args: argparse.Namespace, say=print) -> GridReport:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        llm = build_engine(args, Path(tmp))
        try:
            with startup_heap_frozen():
                report = _run_points(llm, args, started, say)
        finally:
            llm.shutdown()
    report.elapsed_s = time.perf_counter() - started
    return report


def _run_points(llm, args: argparse.Namespace, started: float, say) -> GridReport:
    runner = GridRunner(llm, args)
    prompts = random_prompts(max(args.batch_sizes), runner.vocab_size, args.seed)
    runner.warm_up(prompts)
    report = GridReport(
        model=args.random_arch or str(args.model or "SmolLM2-135M-Instruct"),
        device=args.device,
        dtype=str(llm.engine.dtype).removeprefix("torch."),
        max_tokens=args.max_tokens,
        draft_lengths=sorted(args.draft_lengths),
        oracle_confidence=args.oracle_confidence,
        rounds=args.rounds,
        min_seconds=getattr(args, "min_seconds", 0.0),
        waves=getattr(args, "waves", 1),
        build_s=time.perf_counter() - started,
    )
    say(f"[grid] engine built and warmed up in {report.build_s:.1f} s")
    durations: dict[int, float] = {}
    for acceptance, batch in ordered_points(args.acceptance, args.batch_sizes):
        elapsed = time.perf_counter() - started
        if args.time_budget is not None and elapsed + estimate_s(durations, batch) > args.time_budget:
            report.skipped.append((acceptance, batch))
            continue
        point_started = time.perf_counter()
        runs = {
            mode: lambda r, mode=mode, chosen=prompts[:batch], acc=acceptance: runner.run(
                mode, chosen, acc, round_=r
            )
            for mode in ["off", *(f"k{k}" for k in sorted(args.draft_lengths)), SCHEDULER]
        }
        rounds = list(alternate(runs, args.rounds))
        # Short runs (small batches) are the noisiest: more rounds until every mode ran long enough.
        min_seconds, cap = getattr(args, "min_seconds", 0.0), MAX_ROUNDS_FACTOR * args.rounds
        while len(rounds) < cap and min(sum(r[m].seconds for r in rounds) for m in runs) < min_seconds:
            rounds += alternate(runs, 1, first=len(rounds))
        point = Point(acceptance, batch, {mode: pooled([r[mode] for r in rounds]) for mode in runs})
        report.points.append(point)
        durations[batch] = time.perf_counter() - point_started
        say(f"{format_point(point)}  ({durations[batch]:.1f} s)")
        if (acceptance, batch) in getattr(args, "profile_points", ()):
            from engine.bench.grid_profile import profile_point

            modes = ("off", point.best_fixed, SCHEDULER)
            point.profiles = profile_point(runner, point, modes, prompts[:batch], args.profile_dir, say)
    report.points.sort(key=lambda p: (p.acceptance, p.batch_size))
    report.goals = check_goals(report.points)
    return report


def check_goals(points: list[Point]) -> list[Goal]:
    def where(p: Point) -> str:
        return f"acceptance {p.acceptance}, batch {p.batch_size}"

    goals = []
    worst = min(points, key=lambda p: p.scheduler_vs_best_fixed, default=None)
    goals.append(
        Goal(
            f"scheduler >= {MIN_VS_BEST_FIXED:.2f} x best fixed length at every point",
            None if worst is None else worst.scheduler_vs_best_fixed >= MIN_VS_BEST_FIXED,
            "not measured"
            if worst is None
            else f"worst {worst.scheduler_vs_best_fixed:.3f} x at {where(worst)} (best {worst.best_fixed})",
        )
    )
    anchor = next((p for p in points if p.batch_size == 1 and p.acceptance == ANCHOR_ACCEPTANCE), None)
    goals.append(
        Goal(
            f"scheduler >= {MIN_SPEEDUP_BATCH_1:.1f} x off at batch 1, acceptance {ANCHOR_ACCEPTANCE}",
            None if anchor is None else anchor.scheduler_vs_off >= MIN_SPEEDUP_BATCH_1,
            "not measured" if anchor is None else f"{anchor.scheduler_vs_off:.3f} x",
        )
    )
    slowest = min(
        (p for p in points if p.batch_size >= LARGE_BATCH), key=lambda p: p.scheduler_vs_off, default=None
    )
    goals.append(
        Goal(
            f"scheduler >= {MIN_VS_OFF_LARGE_BATCH:.2f} x off at batch >= {LARGE_BATCH}",
            None if slowest is None else slowest.scheduler_vs_off >= MIN_VS_OFF_LARGE_BATCH,
            "not measured"
            if slowest is None
            else f"worst {slowest.scheduler_vs_off:.3f} x at {where(slowest)}",
        )
    )
    return goals


def format_point(p: Point) -> str:
    fixed = "".join(f"{r.tokens_per_s:>9.1f}" for m, r in p.modes.items() if m.startswith("k"))
    s = p.modes[SCHEDULER]
    fixed_accept = "-" if p.fixed_acceptance is None else f"{p.fixed_acceptance:.2f}"
    accept = "-" if s.position_acceptance is None else f"{s.position_acceptance:.2f}"
    draft = "-" if s.mean_draft_len is None else f"{s.mean_draft_len:.2f}"
    gc_share = max(r.gc_seconds / r.seconds for r in p.modes.values())
    graphed = f"{sum(r.graphed_verify_steps for r in p.modes.values())}/{sum(r.verify_steps for r in p.modes.values())}"
    return (
        f"{p.acceptance:>5.2f}{p.batch_size:>6}{p.modes['off'].tokens_per_s:>9.1f}{fixed}"
        f"{s.tokens_per_s:>9.1f}{p.best_fixed:>6}{p.scheduler_vs_best_fixed:>9.3f}{p.scheduler_vs_off:>9.3f}"
        f"{fixed_accept:>7}{accept:>7}{draft:>7}{f'{s.steps_without_drafts}/{s.drafting_steps}':>10}"
        f"{graphed:>12}{s.speculator_seconds / s.seconds:>8.1%}{gc_share:>6.1%}"
    )


def format_report(report: GridReport) -> str:
    fixed = "".join(f"{'k=' + str(k):>9}" for k in report.draft_lengths)
    lines = [
        f"speculative grid: {report.model} on {report.device} ({report.dtype}), {report.max_tokens} output "
        f"tokens per request, oracle drafts (confidence {report.oracle_confidence}) accepted at the forced "
        f"rate acc; tok/s of output tokens, pooled over {report.rounds} alternating round(s) per mode"
        + (
            f" (more, up to {MAX_ROUNDS_FACTOR * report.rounds}, until each mode ran {report.min_seconds:g} s)"
            if report.min_seconds
            else ""
        )
        + (
            f"; {report.waves} waves of each batch's requests at that concurrency" if report.waves > 1 else ""
        ),
        HEADER.format(fixed=fixed),
    ]
    lines += [format_point(p) for p in report.points]
    if report.skipped:
        skipped = ", ".join(f"({a}, {b})" for a, b in report.skipped)
        lines.append(f"skipped over the time budget (acceptance, batch): {skipped}")
    lines.append(
        "k.p: per-position acceptance over the fixed lengths, accepted / decided draft tokens (up to "
        "each draft's first rejection; expect acc); s.p: the scheduler's; s.len: its verified draft "
        "tokens per draft; s.nodraft: its synchronous steps that drafted nothing / all its drafting "
        "steps; graphed: verify steps replayed from the decode CUDA graphs / all verify steps, over "
        "every mode of the point; s.host: the scheduler's speculator host time / its run time; gc: the "
        "largest share of a mode's run time the garbage collector paused it (accepted / drafted tokens "
        "per mode: acceptance_rate in --json)"
    )
    for goal in report.goals:
        verdict = {True: "PASS", False: "FAIL", None: "NOT RUN"}[goal.passed]
        lines.append(f"{verdict:<8}{goal.name}: {goal.detail}")
    lines.append(f"build + warm-up {report.build_s:.1f} s, total {report.elapsed_s:.1f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.waves < 1:
        print("chassis bench speculative --grid: --rounds and --waves must be >= 1", file=sys.stderr)
        return 2
    if args.min_seconds < 0:
        print("chassis bench speculative --grid: --min-seconds must be >= 0", file=sys.stderr)
        return 2
    from engine.bench.grid_profile import parse_point  # light: no torch

    try:
        args.profile_points = [parse_point(text) for text in args.profile_point]
    except ValueError as error:
        print(f"chassis bench speculative --grid: {error}", file=sys.stderr)
        return 2
    args.batch_sizes = args.batch_sizes or [1, 16, 64, 128, 256]
    args.max_tokens = args.max_tokens or 64
    fixed = "".join(f"{'k=' + str(k):>9}" for k in sorted(args.draft_lengths))
    print(HEADER.format(fixed=fixed) + "  (as measured)", flush=True)
    report = run_grid(args, say=lambda line: print(line, flush=True))
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(asdict(report), f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if any(goal.passed is False for goal in report.goals) else 0
