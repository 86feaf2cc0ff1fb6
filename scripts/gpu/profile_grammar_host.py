"""Host cost of each piece of a structured step's masking on this machine (issue 19's cached-schema
TTFT): matcher creation, mask fill (each matcher's own call vs xgrammar's batch filler, at the
grammars' start states and after some random accepted tokens), the copy to the device and xgrammar's
apply kernel, median microseconds of many calls, at 1 and 64 rows. Three torch operations in place
of the apply kernel measured 42-52 us against its 29-32 us on 2026-12-02 and were dropped.
Usage (device machine, carry .gpucarry):

    python3 scripts/gpu/profile_grammar_host.py --tokenizer .gpucarry/smollm2-tokenizer
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch


def timed(fn, repeat: int = 200, sync: bool = False) -> float:
    """Median host microseconds of ``fn()`` (``sync``: the device drained before each call)."""
    samples = []
    for _ in range(repeat):
        if sync:
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def advance(
    matchers: list, host: torch.Tensor, vocab: int, steps: int, stop_ids: set[int], seed: int
) -> None:
    """Each matcher accepts up to ``steps`` random allowed tokens, never a stop token."""
    import xgrammar as xgr

    rng = random.Random(seed)
    allowed = torch.zeros(vocab, dtype=torch.float32)
    for row, matcher in enumerate(matchers):
        for _ in range(steps):
            matcher.fill_next_token_bitmask(host, row)
            allowed.zero_()
            xgr.apply_token_bitmask_inplace(allowed.view(1, -1), host[row : row + 1])
            ids = [i for i in torch.isfinite(allowed).nonzero().flatten().tolist() if i not in stop_ids]
            if not ids:
                break
            matcher.accept_token(rng.choice(ids))


def profile(
    compiled: list, rows: int, vocab: int, stop_ids: set[int], device: torch.device
) -> dict[str, float]:
    import xgrammar as xgr

    from engine.structured.bitmask import GrammarMasks

    words = -(-vocab // 32)
    matchers = [xgr.GrammarMatcher(compiled[i]) for i in range(rows)]
    masks = GrammarMasks(device)
    host = masks.host_buffer(rows, words)
    logits = torch.randn(
        rows, vocab, device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32
    )
    on_device = host.to(device)
    every = list(range(rows))

    def own_fills() -> None:
        for row, matcher in enumerate(matchers):
            matcher.fill_next_token_bitmask(host, row)

    figures = {"matcher creation (each)": timed(lambda: xgr.GrammarMatcher(compiled[0]))}
    for state in ("start", "after 24 random tokens"):
        if state != "start":
            advance(matchers, host, vocab, 24, stop_ids, seed=rows)
        figures[f"fill at {state}, own calls (whole batch)"] = timed(own_fills)
        for threads in ("auto", 4):
            filler = xgr.BatchGrammarMatcher(max_threads=threads)
            figures[f"fill at {state}, batch filler {threads} threads"] = timed(
                lambda filler=filler: filler.batch_fill_next_token_bitmask(matchers, host, every)
            )
    figures["copy to device + event"] = timed(lambda: masks.to_device(masks.host_buffer(rows, words)))
    figures["apply, xgrammar kernel"] = timed(lambda: xgr.apply_token_bitmask_inplace(logits, on_device))
    figures["apply, xgrammar kernel, device drained"] = timed(
        lambda: xgr.apply_token_bitmask_inplace(logits, on_device), sync=device.type == "cuda"
    )
    if device.type == "cuda":
        torch.cuda.synchronize()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True, help="a tokenizer directory")
    parser.add_argument("--vocab", type=int, default=128256, help="logits width (default: %(default)s)")
    parser.add_argument("--device", default="cuda", help="cuda | cpu (default: %(default)s)")
    args = parser.parse_args()

    import xgrammar as xgr

    from engine.bench.structured_overhead import compact_json_spec, distinct_schemas
    from engine.structured.spec import to_grammar
    from engine.tokenizer import Tokenizer

    device = torch.device(args.device)
    tok = Tokenizer(args.tokenizer)
    info = xgr.TokenizerInfo.from_huggingface(
        tok.hf, vocab_size=args.vocab, stop_token_ids=list(tok.eos_token_ids)
    )
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    compiled = [compiler.compile_grammar(to_grammar(compact_json_spec(s))) for s in distinct_schemas(64, 0)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, vocab {args.vocab}")
    for rows in (1, 64):
        for name, us in profile(compiled, rows, args.vocab, set(tok.eos_token_ids), device).items():
            print(f"rows {rows:>3}  {name:<56}{us:>10.1f} us")


if __name__ == "__main__":
    main()
