"""``chassis bench structured``: what grammar-constrained decoding costs, side by side in one run.

One process, one random-weight model (``engine.bench.random_arch``, default Llama-3.1-8B's shape):

* Step time: the same batch decodes a fixed number of steps unconstrained, then with every request
  held to its own JSON schema (``engine.testing.json_schemas``), and the ratio of the mean step
  times is the overhead. A request whose JSON is complete (its grammar accepted the end token) starts
  the next document of the same schema at once, so every row is constrained at every timed step;
  every complete document is checked against its schema. Where the structured time goes is timed
  around the engine's own ``apply_grammars``: the host filling the masks, the rest of the call on the
  host, and (CUDA) the device time between the logits being ready and the masked logits. A step
  whose rows are constrained overlaps only up to its sampling (its masks wait for the step in flight
  to be read), so the unconstrained batch also runs with async scheduling off, for reference.
* TTFT: one request at a time on an idle engine, unconstrained, with a schema never seen before
  (compiled on the critical path) and with that schema again (a cache hit). Each round runs the new
  schema first, then the unconstrained request and the cache hit in alternating order; what a schema
  adds is the p50 over rounds of the round's difference to its unconstrained request (paired, so a
  drift of the host's speed over the run cancels out). Where a request's time goes is split into
  its admission (``prepare`` and ``add``: the schema check and the cache lookup) and the steps.

Random weights carry no text, so the grammars need a real tokenizer: by default the SmolLM2 GGUF's
(``engine.testing.smollm2``, 49,152 tokens), whose ids are the first ones of the model's larger
vocabulary. The engine compiles grammars over the model's logits width, as for any checkpoint whose
embedding table is padded beyond its tokenizer: ids the tokenizer lacks are never allowed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.config_cli import OptionError
from measurement import Summary

STEP_OVERHEAD_GOAL = 1.05  # structured mean step time / unconstrained
NEW_SCHEMA_GOAL_MS = 50.0  # added TTFT at p50, schema compiled on the critical path
CACHE_HIT_GOAL_MS = 1.0  # added TTFT at p50, schema compiled before


@dataclass
class Report:
    random_arch: str
    tokenizer: str
    device: str
    batch_size: int
    steps: int
    requests: int
    async_scheduling: bool
    step_ms_unconstrained: float
    step_ms_structured: float
    step_overhead_ratio: float
    # Unconstrained with async scheduling off (None when it was off anyway): what a structured step
    # would cost if it lost the overlap entirely (it keeps it up to its sampling).
    step_ms_unconstrained_sync: float | None
    constrained_rows_per_step: float
    grammar_host_ms_per_step: float  # the whole apply_grammars call on the host
    mask_fill_host_ms_per_step: float  # of which: the matchers filling the bitmask
    grammar_device_ms_per_step: float | None  # CUDA: logits ready -> masked logits (copy, apply, waits)
    documents_complete: int
    documents_valid: int
    ttft_p50_ms_unconstrained: float
    ttft_p50_ms_new_schema: float
    ttft_p50_ms_cache_hit: float
    ttft_added_ms_new_schema: float  # p50 of the paired differences (see the module's docstring)
    ttft_added_ms_cache_hit: float
    # Of the TTFT: the request's admission (prepare + add), p50.
    admission_p50_ms_unconstrained: float
    admission_p50_ms_cache_hit: float
    # The constrained TTFT requests' apply_grammars calls (one per request): host ms, device ms.
    ttft_grammar_host_ms_per_call: float
    ttft_grammar_device_ms_per_call: float | None
    # Of the admission: the spec checked (converted to a grammar) on every request, cache hit or not.
    schema_check_ms_p50: float
    goals: dict = field(default_factory=dict)  # name -> passed

    def check_goals(self) -> None:
        self.goals = {
            "step_overhead_ratio": self.step_overhead_ratio <= STEP_OVERHEAD_GOAL,
            "ttft_added_ms_new_schema": self.ttft_added_ms_new_schema <= NEW_SCHEMA_GOAL_MS,
            "ttft_added_ms_cache_hit": self.ttft_added_ms_cache_hit <= CACHE_HIT_GOAL_MS,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--random-arch",
        default="llama-3.1-8b",
        help="architecture with random weights (engine.bench.random_arch; tiny-llama on CPU) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="checkpoint directory or GGUF file whose tokenizer the grammars use; its vocabulary must "
        "not exceed the architecture's (default: the SmolLM2-135M-Instruct GGUF)",
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda (default: %(default)s)")
    parser.add_argument(
        "--dtype", default=None, help="weights' and activations' dtype (default: the architecture's)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="requests decoding together, each its own schema (default: %(default)s)",
    )
    parser.add_argument(
        "--steps", type=int, default=128, help="timed decode steps per mode (default: %(default)s)"
    )
    parser.add_argument(
        "--warmup-steps", type=int, default=16, help="untimed decode steps before them (default: %(default)s)"
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=40,
        help="TTFT: requests of each kind (unconstrained, new schema, cached schema) (default: %(default)s)",
    )
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt tokens (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="schema and prompt seed (default: %(default)s)")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the report as JSON to OUT")


def _say(message: str) -> None:
    print(f"[bench structured] {message}", file=sys.stderr, flush=True)


def write_model_dir(arch: str, tokenizer_source: Path, out_dir: Path) -> tuple[Path, int]:
    """config.json of ``arch`` (random weights: ``load_format="dummy"``) beside the tokenizer files of
    ``tokenizer_source``, whose special ids replace the architecture's; returns (dir, tokenizer size)."""
    from engine.bench.random_arch import hf_config
    from engine.tokenizer import Tokenizer

    config = hf_config(arch)
    hf = Tokenizer(tokenizer_source).hf
    if len(hf) > config["vocab_size"]:
        raise OptionError(
            f"--tokenizer has {len(hf)} tokens, more than --random-arch {arch}'s {config['vocab_size']}"
        )
    config["bos_token_id"] = hf.bos_token_id
    config["eos_token_id"] = hf.eos_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    hf.save_pretrained(str(out_dir))
    return out_dir, len(hf)


def distinct_schemas(count: int, seed: int) -> list[dict]:
    from engine.testing.json_schemas import json_schemas

    seen: dict[str, dict] = {}
    batch = count
    while len(seen) < count:
        for schema in json_schemas(batch, seed):
            seen.setdefault(json.dumps(schema), schema)
        batch *= 2
    return list(seen.values())[:count]


def compact_json_spec(schema: dict):
    """The schema's grammar with no whitespace between tokens (xgrammar's ``any_whitespace=False``,
    vLLM's ``disable_any_whitespace``), as an EBNF spec the engine compiles as any other. A random
    model sampling JSON's free whitespace would fill its output with it and never end a document."""
    from engine.structured.spec import StructuredSpec, json_schema_grammar

    return StructuredSpec("grammar", str(json_schema_grammar(json.dumps(schema), any_whitespace=False)))


def _repeating(compiled, vocab_size: int):
    """A request grammar that starts the next document as soon as one is complete (so the row stays
    constrained at every step of a fixed-length run); the end token separates the documents."""
    from engine.structured.grammar import RequestGrammar

    class RepeatingGrammar(RequestGrammar):
        @property
        def matcher(self):  # every use (mask, batch or single accept) finds a terminated one reset
            matcher = super().matcher
            if matcher is not None and matcher.is_terminated():
                matcher.reset()
            return matcher

        @property
        def terminated(self) -> bool:  # what ``active`` asks: never, the next document starts
            _ = self.matcher  # resets a terminated one
            return False

    return RepeatingGrammar(compiled, vocab_size)


class GrammarTimer:
    """Times the engine's ``apply_grammars`` (host, and on CUDA the device between its events) and,
    inside it, the matchers' mask filling."""

    def __init__(self, device) -> None:
        self.device = device
        self.calls = 0
        self.host_s = 0.0
        self.fill_s = 0.0
        self.events: list = []

    @contextmanager
    def installed(self):
        import torch

        from engine.runner import model_runner
        from engine.structured.bitmask import GrammarMasks

        apply, fill = model_runner.apply_grammars, GrammarMasks.fill
        cuda = self.device.type == "cuda"

        def timed_fill(masks, *args, **kwargs):
            started = time.perf_counter()
            try:
                return fill(masks, *args, **kwargs)
            finally:
                self.fill_s += time.perf_counter() - started

        def timed_apply(*args):
            if cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
            started = time.perf_counter()
            apply(*args)
            self.host_s += time.perf_counter() - started
            self.calls += 1
            if cuda:
                end.record()
                self.events.append((begin, end))

        model_runner.apply_grammars, GrammarMasks.fill = timed_apply, timed_fill
        try:
            yield self
        finally:
            model_runner.apply_grammars, GrammarMasks.fill = apply, fill

    def device_ms(self) -> float | None:
        if not self.events:
            return None
        import torch

        torch.cuda.synchronize()
        return sum(b.elapsed_time(e) for b, e in self.events) / len(self.events)


def _decode_run(core, prompts, params_list, steps: int, warmup: int, grammars=None, timer=None):
    """Add the batch, prefill it, decode ``warmup`` then ``steps`` timed steps, finish; returns
    (seconds per timed step, constrained rows per timed step, each request's token ids)."""
    from engine.structured.bitmask import constrained_rows

    ids = []
    for i, (prompt, params) in enumerate(zip(prompts, params_list, strict=True)):
        prepared = core.prepare(prompt, params)
        if grammars is not None:
            prepared.request.grammar = grammars[i]
        ids.append(core.add(prepared))
    tokens: dict[str, list[int]] = {rid: [] for rid in ids}

    def step() -> None:
        for out in core.step():
            tokens[out.request_id].extend(out.new_token_ids)

    while any(not t for t in tokens.values()):  # prefill, up to every request's first token
        step()
    for _ in range(warmup):
        step()
    rows = 0
    started = time.perf_counter()
    with timer.installed() if timer is not None else _nothing():
        for _ in range(steps):
            rows += len(constrained_rows(core.scheduler.running))
            step()
        elapsed = time.perf_counter() - started
    while core.has_unfinished():
        step()
    return elapsed / steps, rows / steps, [tokens[rid] for rid in ids]


@contextmanager
def _nothing():
    yield


def _documents(token_ids: list[int], end_ids: set[int]) -> list[list[int]]:
    """The complete documents of a repeating-grammar output (each closed by an end token)."""
    docs, current = [], []
    for token in token_ids:
        if token in end_ids:
            docs.append(current)
            current = []
        else:
            current.append(token)
    return docs


def count_valid(outputs: list[list[int]], schemas: list[dict], tokenizer) -> tuple[int, int]:
    import jsonschema

    end_ids = set(tokenizer.eos_token_ids)
    complete = valid = 0
    for token_ids, schema in zip(outputs, schemas, strict=True):
        for doc in _documents(token_ids, end_ids):
            complete += 1
            try:
                jsonschema.validate(json.loads(tokenizer.decode(doc)), schema)
            except (ValueError, jsonschema.ValidationError):
                continue
            valid += 1
    return complete, valid


def _ttft(core, prompt: list[int], params) -> tuple[float, float]:
    """(TTFT, of which admission) in seconds, for one request on the idle engine."""
    started = time.perf_counter()
    rid = core.add(core.prepare(prompt, params))
    admitted = time.perf_counter() - started
    first = None
    while core.has_unfinished():
        for out in core.step():
            if out.request_id == rid and out.new_token_ids and first is None:
                first = time.perf_counter() - started
    return first, admitted


KINDS = ("unconstrained", "new_schema", "cache_hit")


def measure_ttft(core, prompts, specs, params_of) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(TTFT ms, admission ms) per kind, one round per schema (three prompts each): the new schema
    first, then the unconstrained request and the cache hit of the same schema, their order
    alternating from round to round."""
    ttft: dict[str, list[float]] = {kind: [] for kind in KINDS}
    admission: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for i, spec in enumerate(specs):
        free, new, hit = prompts[3 * i : 3 * i + 3]
        runs = [("unconstrained", free, None), ("cache_hit", hit, spec)]
        for kind, prompt, structured in [("new_schema", new, spec)] + (runs if i % 2 == 0 else runs[::-1]):
            first, admitted = _ttft(core, prompt, params_of(structured))
            ttft[kind].append(first * 1e3)
            admission[kind].append(admitted * 1e3)
    return ttft, admission


def paired_added_ms(ttft: dict[str, list[float]], kind: str) -> float:
    """p50 over rounds of what ``kind`` added to its round's unconstrained TTFT."""
    return Summary.of([t - free for t, free in zip(ttft[kind], ttft["unconstrained"], strict=True)]).p50


def run_bench(args: argparse.Namespace) -> Report:
    from engine import LLM
    from engine.bench.random_arch import hf_config

    for name in ("batch_size", "steps", "requests", "prompt_len"):
        if getattr(args, name) < 1:
            raise OptionError(f"--{name.replace('_', '-')} must be >= 1")
    tokenizer_source = args.tokenizer
    if tokenizer_source is None:
        from engine.testing.smollm2 import smollm2_path

        tokenizer_source = smollm2_path()
    dtype = args.dtype or hf_config(args.random_arch)["torch_dtype"]
    max_tokens = args.warmup_steps + args.steps + 4  # every request runs through the timed steps
    with tempfile.TemporaryDirectory(prefix="bench-structured-") as tmp:
        model_dir, tokenizer_vocab = write_model_dir(
            args.random_arch, Path(tokenizer_source), Path(tmp) / "model"
        )
        _say(f"loading {args.random_arch} with random weights on {args.device} ({dtype})")
        llm = LLM(
            str(model_dir),
            device=args.device,
            dtype=dtype,
            load_format="dummy",
            max_num_seqs=args.batch_size,
            max_model_len=args.prompt_len + max_tokens + 16,
        )
        try:
            report = _measure(llm.engine, args, tokenizer_vocab, max_tokens)
        finally:
            llm.shutdown()
    report.tokenizer = str(tokenizer_source)
    report.check_goals()
    return report


def _measure(core, args: argparse.Namespace, tokenizer_vocab: int, max_tokens: int) -> Report:
    import torch

    from engine import SamplingParams
    from engine.bench.workloads import random_prompts
    from engine.structured.spec import StructuredSpec, check

    # Distinct prompts throughout, so that no request reuses another's prefix-cached KV.
    prompts = random_prompts(
        args.batch_size + 3 * (args.requests + 1),
        args.prompt_len,
        args.prompt_len,
        tokenizer_vocab,
        args.seed,
    )
    batch_prompts, ttft_prompts = prompts[: args.batch_size], prompts[args.batch_size :]
    schemas = distinct_schemas(args.batch_size + args.requests + 1, args.seed)
    batch_schemas, ttft_schemas = schemas[: args.batch_size], schemas[args.batch_size :]
    batch_specs = [compact_json_spec(s) for s in batch_schemas]

    pool = core.grammar_pool()
    _say(f"compiling {len(batch_specs)} schemas for the batch")
    compiled = [pool.compiled(spec) for spec in batch_specs]
    for future in compiled:
        future.result()

    # Sampled (temperature 1, the engine seeds each request): a greedy random model can repeat
    # the whitespace JSON allows between tokens for ever, and its documents would never end.
    def params(structured: list | None, tokens: int) -> list:
        specs = structured or [None] * args.batch_size
        return [
            SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=1.0, structured=s) for s in specs
        ]

    def grammars():
        return [_repeating(c, pool.vocab_size) for c in compiled]

    _say(f"warm-up: batch {args.batch_size}, both modes")
    _decode_run(core, batch_prompts, params(None, 3), steps=1, warmup=0)
    _decode_run(core, batch_prompts, params(batch_specs, 3), steps=1, warmup=0, grammars=grammars())
    _say(f"decode: {args.steps} timed steps unconstrained (async scheduling on, then off), then structured")
    step_free, _, _ = _decode_run(
        core, batch_prompts, params(None, max_tokens), args.steps, args.warmup_steps
    )
    step_sync = None
    if core.async_scheduling:
        core.async_scheduling = False  # safe between runs: no step in flight
        step_sync, _, _ = _decode_run(
            core, batch_prompts, params(None, max_tokens), args.steps, args.warmup_steps
        )
        core.async_scheduling = True
    timer = GrammarTimer(core.device)
    step_structured, rows, outputs = _decode_run(
        core, batch_prompts, params(batch_specs, max_tokens), args.steps, args.warmup_steps, grammars(), timer
    )
    complete, valid = count_valid(outputs, batch_schemas, core.tokenizer)

    _say(f"TTFT: {args.requests} requests of each kind")

    def params_of(spec):
        return SamplingParams(max_tokens=1, temperature=0.0, structured=spec)

    ttft_specs = [StructuredSpec.json_schema(s) for s in ttft_schemas]
    measure_ttft(core, ttft_prompts[:3], ttft_specs[-1:], params_of)  # warm-up
    ttft_timer = GrammarTimer(core.device)
    with ttft_timer.installed():
        ttft, admission = measure_ttft(core, ttft_prompts[3:], ttft_specs[: args.requests], params_of)
    p50 = {kind: Summary.of(values).p50 for kind, values in ttft.items()}
    admission_p50 = {kind: Summary.of(values).p50 for kind, values in admission.items()}
    checks = []
    for spec in ttft_specs:
        started = time.perf_counter()
        check(spec)
        checks.append((time.perf_counter() - started) * 1e3)
    calls = max(timer.calls, 1)
    return Report(
        random_arch=args.random_arch,
        tokenizer="",
        device="cpu" if core.device.type == "cpu" else torch.cuda.get_device_name(core.device),
        batch_size=args.batch_size,
        steps=args.steps,
        requests=args.requests,
        async_scheduling=core.async_scheduling,
        step_ms_unconstrained=step_free * 1e3,
        step_ms_structured=step_structured * 1e3,
        step_overhead_ratio=step_structured / step_free,
        step_ms_unconstrained_sync=None if step_sync is None else step_sync * 1e3,
        constrained_rows_per_step=rows,
        grammar_host_ms_per_step=timer.host_s / calls * 1e3,
        mask_fill_host_ms_per_step=timer.fill_s / calls * 1e3,
        grammar_device_ms_per_step=timer.device_ms(),
        documents_complete=complete,
        documents_valid=valid,
        ttft_p50_ms_unconstrained=p50["unconstrained"],
        ttft_p50_ms_new_schema=p50["new_schema"],
        ttft_p50_ms_cache_hit=p50["cache_hit"],
        ttft_added_ms_new_schema=paired_added_ms(ttft, "new_schema"),
        ttft_added_ms_cache_hit=paired_added_ms(ttft, "cache_hit"),
        admission_p50_ms_unconstrained=admission_p50["unconstrained"],
        admission_p50_ms_cache_hit=admission_p50["cache_hit"],
        ttft_grammar_host_ms_per_call=ttft_timer.host_s / max(ttft_timer.calls, 1) * 1e3,
        ttft_grammar_device_ms_per_call=ttft_timer.device_ms(),
        schema_check_ms_p50=Summary.of(checks).p50,
    )


def format_report(r: Report) -> str:
    def verdict(name: str) -> str:
        return "pass" if r.goals.get(name) else "FAIL"

    sync_ms = "-" if r.step_ms_unconstrained_sync is None else f"{r.step_ms_unconstrained_sync:.3f}"
    device_ms = "-" if r.grammar_device_ms_per_step is None else f"{r.grammar_device_ms_per_step:.3f}"
    lines = [
        f"structured decoding overhead: {r.random_arch}, {r.device}, batch {r.batch_size}, "
        f"{r.steps} steps, async scheduling {'on' if r.async_scheduling else 'off'}",
        f"tokenizer: {r.tokenizer}",
        "",
        f"{'figure':<44}{'value':>12}  {'goal':<10}{'':>5}",
        f"{'step ms, unconstrained':<44}{r.step_ms_unconstrained:>12.3f}",
        f"{'step ms, every row constrained':<44}{r.step_ms_structured:>12.3f}",
        f"{'overhead (structured / unconstrained)':<44}{r.step_overhead_ratio:>12.3f}  "
        f"{'<= ' + str(STEP_OVERHEAD_GOAL):<10}{verdict('step_overhead_ratio'):>5}",
        f"{'  unconstrained, async scheduling off, ms':<44}{sync_ms:>12}",
        f"{'  constrained rows per step':<44}{r.constrained_rows_per_step:>12.1f}",
        f"{'  apply_grammars on the host, ms/step':<44}{r.grammar_host_ms_per_step:>12.3f}",
        f"{'    of which mask fill, ms/step':<44}{r.mask_fill_host_ms_per_step:>12.3f}",
        f"{'  device, logits to masked logits, ms/step':<44}{device_ms:>12}",
        f"{'JSON documents complete / valid':<44}{f'{r.documents_complete} / {r.documents_valid}':>12}",
        f"{'TTFT p50 ms, unconstrained':<44}{r.ttft_p50_ms_unconstrained:>12.3f}",
        f"{'TTFT p50 ms, new schema':<44}{r.ttft_p50_ms_new_schema:>12.3f}",
        f"{'TTFT p50 ms, cached schema':<44}{r.ttft_p50_ms_cache_hit:>12.3f}",
        f"{'  added by a new schema (paired p50), ms':<44}{r.ttft_added_ms_new_schema:>12.3f}  "
        f"{'<= ' + str(NEW_SCHEMA_GOAL_MS):<10}{verdict('ttft_added_ms_new_schema'):>5}",
        f"{'  added by a cached schema (paired p50), ms':<44}{r.ttft_added_ms_cache_hit:>12.3f}  "
        f"{'<= ' + str(CACHE_HIT_GOAL_MS):<10}{verdict('ttft_added_ms_cache_hit'):>5}",
        f"{'    the schema check (every request), p50 ms':<44}{r.schema_check_ms_p50:>12.3f}",
        f"{'    admission p50 ms, unconstrained / hit':<44}{r.admission_p50_ms_unconstrained:>12.3f}"
        f" / {r.admission_p50_ms_cache_hit:.3f}",
        f"{'    first mask, host / device ms per request':<44}{r.ttft_grammar_host_ms_per_call:>12.3f}"
        f" / {'-' if r.ttft_grammar_device_ms_per_call is None else f'{r.ttft_grammar_device_ms_per_call:.3f}'}",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = run_bench(args)
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(asdict(report), f, indent=2)
        _say(f"wrote {args.json}")
    # The goals are for the GPU and shown in the table; only output breaking its schema fails the run.
    return 0 if report.documents_valid == report.documents_complete else 1
