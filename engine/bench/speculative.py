"""``chassis bench speculative``: speculative decoding against none, side by side in one run.

Prompts quote a given text and ask for an edit of it (rename in code, fix a typo, summarise with
quotes), the workload where n-gram prompt lookup pays. For each batch size the same greedy requests
run with speculation off and on (the outputs must match token for token), and the table gives
output tokens per second, the draft acceptance rate, the mean accepted length (tokens emitted per
verified draft) and the speedup over speculation off. The default model is the demo's
SmolLM2-135M-Instruct GGUF (``engine.testing.smollm2``) on the CPU.

``--grid`` measures instead tokens per second against a draft source of known acceptance rate and
the batch size, for fixed draft lengths and the confidence scheduler (``engine/bench/speculative_grid.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

from engine.bench.speculative_grid import add_grid_arguments

CODE = '''def moving_average(values, window):
    """Average of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = sum(values[:window])
    averages.append(total / window)
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        averages.append(total / window)
    return averages
'''
PROSE = (
    "The lighthouse at Point Avery was built in 1871 from granite quarried on the island itself. "
    "Its lamp, first fuelled by whale oil and later by kerosene, was electrified in 1934, and the "
    "last keeper left in 1962 when the light was automated. Today the tower belongs to a local "
    "trust, which opens it to visitors on summer weekends and restored the keeper's cottage in 2009."
)
TASKS = (
    f"Rename the function `moving_average` to `rolling_mean` and the variable `total` to `running_sum`. "
    f"Reply with the full updated code only.\n\n```python\n{CODE}```",
    f"Add type hints (list[float], int, list[float]) to this function and reply with the whole "
    f"function.\n\n```python\n{CODE}```",
    f"Repeat the following text exactly, but replace 'Point Avery' with 'Cape Morrow':\n\n{PROSE}",
    f"Summarise this text in two sentences, quoting its dates exactly:\n\n{PROSE}",
)


@dataclass
class Row:
    batch_size: int
    mode: str  # "off" or the proposer
    output_tokens: int
    seconds: float
    tokens_per_s: float
    acceptance_rate: float | None = None
    mean_accepted_length: float | None = None
    speedup: float | None = None
    identical_to_off: bool | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default=None, help="checkpoint (default: the demo SmolLM2-135M-Instruct GGUF)"
    )
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=None, help="default: 1 16 (--grid: 1 16 64 128 256)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="tokens generated per request (default: 128; --grid: 64)"
    )
    parser.add_argument(
        "--speculative-method", default="ngram", choices=("ngram", "draft_model"), help="default: %(default)s"
    )
    parser.add_argument("--speculative-model", default=None, help="the draft checkpoint (draft_model)")
    parser.add_argument("--num-speculative-tokens", type=int, default=5, help="default: %(default)s")
    parser.add_argument(
        "--speculative-scheduling",
        default="confidence",
        choices=("confidence", "fixed"),
        help="default: %(default)s",
    )
    parser.add_argument("--max-model-len", type=int, default=1024, help="default: %(default)s")
    parser.add_argument(
        "--dtype",
        default=None,
        help="default: float32 (--grid: auto, the checkpoint's, bf16 for the large shapes)",
    )
    parser.add_argument("--device", default="cpu", help="default: %(default)s")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the rows as JSON to OUT")
    add_grid_arguments(parser)


def prompts(tokenizer, n: int) -> list[list[int]]:
    """``n`` prompts cycling through the tasks, in the checkpoint's chat format when it has one."""
    out = []
    for i in range(n):
        task = TASKS[i % len(TASKS)]
        if tokenizer.has_chat_template:
            out.append(tokenizer.encode_chat([{"role": "user", "content": task}]))
        else:
            out.append(tokenizer.encode(task))
    return out


def measure(llm, batch: list[list[int]], params) -> tuple[list[list[int]], float, dict]:
    before = llm.stats()
    started = time.perf_counter()
    outs = llm.generate(batch, params)
    seconds = time.perf_counter() - started
    after = llm.stats()
    counts = {
        name: getattr(after, name) - getattr(before, name)
        for name in (
            "spec_decode_num_drafts",
            "spec_decode_num_draft_tokens",
            "spec_decode_num_accepted_tokens",
        )
    }
    return [o.token_ids for o in outs], seconds, counts


def run_bench(args: argparse.Namespace) -> list[Row]:
    from engine import LLM, SamplingParams

    model = args.model
    if model is None:
        from engine.testing.smollm2 import smollm2_path

        model = str(smollm2_path())
    # A context fitting the prompts keeps the CPU's default KV pool (a full context per sequence) small.
    common = dict(
        device=args.device,
        dtype=args.dtype,
        max_num_seqs=max(args.batch_sizes),
        max_model_len=args.max_model_len,
    )
    modes = {
        "off": {},
        args.speculative_method: dict(
            speculative_method=args.speculative_method,
            speculative_model=args.speculative_model,
            num_speculative_tokens=args.num_speculative_tokens,
            speculative_scheduling=args.speculative_scheduling,
        ),
    }
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    rows: list[Row] = []
    tokens_off: dict[int, list[list[int]]] = {}
    for mode, extra in modes.items():
        llm = LLM(model, **common, **extra)
        batch_prompts = prompts(llm.tokenizer, max(args.batch_sizes))
        llm.generate(batch_prompts[:1], SamplingParams(max_tokens=4, temperature=0.0))  # warm up
        for batch_size in args.batch_sizes:
            tokens, seconds, counts = measure(llm, batch_prompts[:batch_size], params)
            produced = sum(len(t) for t in tokens)
            row = Row(batch_size, mode, produced, seconds, produced / seconds)
            if mode == "off":
                tokens_off[batch_size] = tokens
            else:
                drafts, drafted = counts["spec_decode_num_drafts"], counts["spec_decode_num_draft_tokens"]
                accepted = counts["spec_decode_num_accepted_tokens"]
                row.acceptance_rate = accepted / drafted if drafted else None
                row.mean_accepted_length = 1 + accepted / drafts if drafts else None
                row.identical_to_off = tokens == tokens_off[batch_size]
                off = next(r for r in rows if r.mode == "off" and r.batch_size == batch_size)
                row.speedup = row.tokens_per_s / off.tokens_per_s
            rows.append(row)
        llm.shutdown()
        del llm  # free its KV pool before the next mode allocates one
    return rows


def format_rows(rows: list[Row]) -> str:
    def fmt(value, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        f"{'batch':>5}  {'speculation':<12}{'tokens':>7}{'seconds':>9}{'tok/s':>9}"
        f"{'accept':>8}{'mean len':>9}{'speedup':>9}  same tokens"
    ]
    for r in sorted(rows, key=lambda r: (r.batch_size, r.mode != "off")):
        lines.append(
            f"{r.batch_size:>5}  {r.mode:<12}{r.output_tokens:>7}{r.seconds:>9.2f}{r.tokens_per_s:>9.1f}"
            f"{fmt(r.acceptance_rate, '.1%'):>8}{fmt(r.mean_accepted_length, '.2f'):>9}"
            f"{fmt(r.speedup, '.2f'):>9}  {fmt(r.identical_to_off, '')}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.grid:
        from engine.bench import speculative_grid

        return speculative_grid.run(args)
    args.batch_sizes = args.batch_sizes or [1, 16]
    args.max_tokens = args.max_tokens or 128
    args.dtype = args.dtype or "float32"
    rows = run_bench(args)
    print(format_rows(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    # Greedy speculation is lossless: any difference in the tokens is a failure.
    return 0 if all(r.identical_to_off is not False for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chassis bench speculative", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
