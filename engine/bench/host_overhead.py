"""Host (CPU) cost of one engine step, with the model's forward pass taken out.

Runs the real ``EngineCore`` step loop on CPU at several decode batch sizes. The decode graphs are
"captured" eagerly and then their replay is replaced by nothing (the logits buffers hold fixed random
values), so a decode step costs exactly what the host does around the GPU: scheduling, KV
bookkeeping, input staging, sampling the fixed logits, stop checks, detokenizing and building
outputs. Each phase is timed with ``time.perf_counter`` by wrapping the method that does it.

    python -m engine.bench.host_overhead --batch 1 --batch 32 --batch 128 --batch 256
    python -m engine.bench.host_overhead --batch 128 --profile   # cProfile of the timed steps
    python -m engine.bench.host_overhead --batch 128 --draft-len 0 --draft-len 4   # verify steps

``--draft-len K`` (K > 0) makes every decode step a verify step of K draft tokens per request, as the
speculative grid's fixed length K does (``engine/bench/speculative_grid.py``: the oracle proposer,
acceptance forced to ``--acceptance``): the graphs hold every verify step, so the step's host cost
is timed with the forward taken out as for plain steps. The speculator's own host work (drafting,
the policy, recording acceptance) is its own phase, ``speculator``. K = 0 is plain decoding.
``--scheduling confidence`` runs the confidence scheduler (at most K drafts) instead of a fixed
length. Its step-time models are fixed, not learnt from these host-only steps: verify steps priced
as on the H200 at batch 128 (Llama-3.1-8B shape), plain steps far dearer, so that it drafts at every
step and plans as it would there. Its ``speculator`` phase is then the cost of its decisions on top
of the fixed length's.

    python -m engine.bench.host_overhead --batch 16 --batch 64 --draft-len 5 --scheduling fixed
    python -m engine.bench.host_overhead --batch 16 --batch 64 --draft-len 5 --scheduling confidence
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from engine.spec.policy import StepTimeModel

# (owner attribute path on EngineCore, method name, phase name); nested phases are made exclusive.
_PHASES = (
    ("scheduler", "schedule", "schedule"),
    ("runner.graphs", "run", "inputs"),
    ("runner", "launch", "launch"),
    ("runner", "execute", "execute"),
    ("scheduler", "update_from_output", "update"),
)
# The speculator's hooks (only where one is attached), called by the step itself, beside schedule.
_SPECULATOR_PHASES = (
    ("speculator", "wants_drafts", "speculator"),
    ("speculator", "propose", "speculator"),
    ("speculator", "observe", "speculator"),
)
# Nested calls, made exclusive: execute = launch + reading the ids back; launch includes inputs.
_NESTED = {"execute": "launch", "launch": "inputs"}


def _write_model(out_dir: Path, vocab: int) -> Path:
    from engine.bench.random_arch import write_config_dir

    model_dir = write_config_dir("tiny-llama", out_dir)
    config = json.loads((model_dir / "config.json").read_text())
    # One small layer: the forward only runs for prefill here, which is not timed.
    config.update(num_hidden_layers=1, hidden_size=64, intermediate_size=128, head_dim=16, vocab_size=vocab)
    config["max_position_embeddings"] = 1 << 16
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


def _resolve(obj, path: str):
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


class PhaseTimer:
    """Wraps methods of the live engine so every call adds its wall time to a phase."""

    def __init__(self, core) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.enabled = False
        for owner_path, method, phase in _PHASES + _SPECULATOR_PHASES:
            owner = _resolve(core, owner_path)
            if owner is not None and hasattr(owner, method):
                setattr(owner, method, self._wrap(getattr(owner, method), phase))

    def _wrap(self, fn, phase: str):
        def timed(*args, **kwargs):
            if not self.enabled:
                return fn(*args, **kwargs)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.totals[phase] += time.perf_counter() - started

        return timed

    def exclusive(self, total: float) -> dict[str, float]:
        phases = dict(self.totals)
        for outer, inner in _NESTED.items():
            if outer in phases:
                phases[outer] -= self.totals.get(inner, 0.0)
        phases["outputs+other"] = total - sum(phases.values())
        return phases


def _null_decode_graphs(core, max_batch: int, vocab: int) -> None:
    import torch

    core.runner.capture_decode_graphs(max_batch, eager=True)
    graphs = core.runner.graphs
    graphs.logits = torch.randn(graphs.max_batch, vocab, generator=torch.Generator().manual_seed(0))
    for size in graphs.sizes:
        graphs.replays[size] = lambda: None


def measure(
    batch: int,
    prompt_len: int,
    steps: int,
    vocab: int,
    model_dir: Path,
    async_scheduling: bool,
    final_only: bool,
    profile: bool,
    draft_len: int = 0,
    acceptance: float = 0.8,
    scheduling: str = "fixed",
) -> dict:
    from engine.bench.workloads import random_prompts
    from engine.config import EngineConfig
    from engine.core.engine_core import EngineCore
    from engine.sampling.params import SamplingParams

    # A verify step emits up to draft_len + 1 tokens: enough for every timed step to run the whole batch.
    max_tokens = (steps + 64) * (draft_len + 1)
    blocks = batch * (-(-(prompt_len + max_tokens + draft_len) // 16) + 1)
    config = EngineConfig(
        model_dir=model_dir,
        device="cpu",
        dtype="float32",
        load_format="dummy",
        max_num_seqs=batch,
        max_num_batched_tokens=max(8192, prompt_len, batch * (draft_len + 1)),
        num_gpu_blocks=blocks,
        max_model_len=prompt_len + max_tokens + draft_len + 16,
        **({"async_scheduling": async_scheduling} if _has_async_flag() else {}),
    )
    core = EngineCore(config)
    _null_decode_graphs(core, batch * (draft_len + 1), vocab)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
    for prompt in random_prompts(batch, prompt_len, prompt_len, vocab, seed=batch):
        prepared = core.prepare(prompt, params)
        if final_only and hasattr(prepared, "final_only"):
            prepared.final_only = True
        core.add(prepared)
    # Prefill (real forward of the 1-layer model), then a few decode steps as warm-up.
    while (
        any(r.num_computed_tokens < r.num_tokens - 1 for r in core.scheduler.running)
        or core.scheduler.waiting
    ):
        core.step()
    for _ in range(5):
        core.step()
    if draft_len:
        _attach_drafts(core, draft_len, acceptance, vocab, scheduling)
        for _ in range(3):
            core.step()
    timer = PhaseTimer(core)
    timer.enabled = True
    verified_before = core.runner.graphs.verify_steps_run
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    started = time.perf_counter()
    for _ in range(steps):
        core.step()
    total = time.perf_counter() - started
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    phases = {k: v / steps * 1e6 for k, v in timer.exclusive(total).items()}
    result = {
        "batch": batch,
        "draft_len": draft_len,
        "scheduling": scheduling if draft_len else None,
        "us_per_step": total / steps * 1e6,
        "phases_us": phases,
    }
    if draft_len:  # the timed steps that verified drafts (all of them, unless requests ran out)
        result["verify_steps"] = core.runner.graphs.verify_steps_run - verified_before
    return result


# Under --scheduling confidence: a verify step of T rows costs VERIFY_A + VERIFY_B * T (the H200's
# line at batch 128, session 26), a plain step PLAIN_STEP_SECONDS, dearer than any verify step.
VERIFY_A, VERIFY_B = 0.0048, 0.0000258
PLAIN_STEP_SECONDS = 1.0


def _attach_drafts(core, draft_len: int, acceptance: float, vocab: int, scheduling: str) -> None:
    """Every step from now a verify step of oracle drafts per request, as the speculative grid runs
    it (its proposer and forced acceptance): ``draft_len`` each (fixed), or as many of them as the
    confidence scheduler chooses."""
    from engine.spec.forced_acceptance import ForcedAcceptance
    from engine.spec.oracle import OracleProposer
    from engine.spec.policy import MIN_STEPS_FOR_FIT, SpeculationPolicy
    from engine.spec.speculator import Speculator, verify_graph_sizes

    graph_sizes = verify_graph_sizes(core.runner)
    if scheduling == "fixed":
        policy = SpeculationPolicy(draft_len, "fixed")
    else:
        verify, plain = _FixedStepTimes(), _FixedStepTimes()
        for _ in range(MIN_STEPS_FOR_FIT):
            plain.feed(1, PLAIN_STEP_SECONDS)
        for rows in graph_sizes or (1, 2, 4, 8, 16):
            verify.feed(rows, VERIFY_A + VERIFY_B * rows)
        policy = SpeculationPolicy(draft_len, "confidence", verify, plain, _FixedStepTimes())
    policy.use_graphs(graph_sizes)
    core.speculator = Speculator(
        OracleProposer(acceptance, vocab, 0), policy, core.config.max_num_batched_tokens
    )
    core.runner.acceptance_override = ForcedAcceptance(acceptance, 0)


class _FixedStepTimes(StepTimeModel):
    """A step-time model fed once and deaf afterwards: the steps here cost only their host work."""

    def feed(self, num_tokens: int, seconds: float) -> None:
        super().observe(num_tokens, seconds)

    def observe(self, num_tokens: int, seconds: float) -> None:
        pass


def _has_async_flag() -> bool:
    from engine.config import EngineConfig

    return "async_scheduling" in EngineConfig.__dataclass_fields__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.bench.host_overhead", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--batch", type=int, action="append", help="repeatable (default: 1 32 128 256)")
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=50, help="timed decode steps per batch size")
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--async-scheduling", choices=("on", "off"), default="off")
    parser.add_argument(
        "--outputs",
        choices=("stream", "final"),
        default="stream",
        help="stream: a RequestOutput per token (the server); final: only finished ones (LLM.generate)",
    )
    parser.add_argument(
        "--draft-len",
        type=int,
        action="append",
        help="repeatable: 0 plain decode steps, K > 0 verify steps of K oracle drafts per request (default: 0)",
    )
    parser.add_argument(
        "--acceptance",
        type=float,
        default=0.8,
        help="--draft-len K > 0: the forced acceptance (default: %(default)s)",
    )
    parser.add_argument(
        "--scheduling",
        choices=("fixed", "confidence"),
        default="fixed",
        help="--draft-len K > 0: K drafts at every step, or the confidence scheduler's choice of at most K",
    )
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the timed steps")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    batches = args.batch or [1, 32, 128, 256]
    draft_lens = args.draft_len or [0]
    if any(b < 1 for b in batches) or args.prompt_len < 1 or args.steps < 1 or args.vocab < 400:
        parser.error("batch, prompt length and steps must be positive, vocab at least 400")
    if any(k < 0 for k in draft_lens) or not 0.0 <= args.acceptance <= 1.0:
        parser.error("draft lengths must be >= 0 and the acceptance in [0, 1]")
    import torch

    torch.set_num_threads(1)  # the host thread's own cost, not a thread pool's
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = _write_model(Path(tmp) / "model", args.vocab)
        for batch in batches:
            for draft_len in draft_lens:
                results.append(
                    measure(
                        batch,
                        args.prompt_len,
                        args.steps,
                        args.vocab,
                        model_dir,
                        args.async_scheduling == "on",
                        args.outputs == "final",
                        args.profile,
                        draft_len,
                        args.acceptance,
                        args.scheduling,
                    )
                )
    names = sorted({k for r in results for k in r["phases_us"]}, key=_phase_order)
    print(
        f"host µs per decode step (prompt {args.prompt_len}, {args.steps} steps, outputs={args.outputs}, "
        f"async={args.async_scheduling}, scheduling={args.scheduling})"
    )
    print(f"{'batch':>6} {'drafts':>6} {'total':>9} {'µs/req':>9} " + " ".join(f"{n:>14}" for n in names))
    for r in results:
        row = " ".join(f"{r['phases_us'].get(n, 0.0):>14.1f}" for n in names)
        print(
            f"{r['batch']:>6} {r['draft_len']:>6} {r['us_per_step']:>9.1f} {r['us_per_step'] / r['batch']:>9.2f} {row}"
        )
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": results}))
    return 0


def _phase_order(name: str) -> int:
    order = ["speculator", "schedule", "inputs", "launch", "execute", "update", "outputs+other"]
    return order.index(name) if name in order else len(order)


if __name__ == "__main__":
    sys.exit(main())
