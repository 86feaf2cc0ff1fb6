"""Host cost of each piece of a structured step's masking on this machine (issue 19's cached-schema
TTFT): matcher creation, mask fill (one matcher alone and through the batch filler), the copy to the
device, and applying the mask (xgrammar's Triton kernel vs torch ops), median microseconds of many
calls, at 1 and 64 rows. Usage (device machine, carry .gpucarry):

    python3 scripts/gpu/profile_grammar_host.py --tokenizer .gpucarry/smollm2-tokenizer
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True, help="a tokenizer directory")
    parser.add_argument("--vocab", type=int, default=128256, help="logits width (default: %(default)s)")
    args = parser.parse_args()

    import xgrammar as xgr

    from engine.bench.structured_overhead import distinct_schemas
    from engine.structured.bitmask import GrammarMasks, apply_bitmask
    from engine.structured.spec import StructuredSpec, to_grammar
    from engine.tokenizer import Tokenizer

    device = torch.device("cuda")
    tok = Tokenizer(args.tokenizer)
    info = xgr.TokenizerInfo.from_huggingface(tok.hf, vocab_size=args.vocab, stop_token_ids=list(tok.eos_token_ids))
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    compiled = [compiler.compile_grammar(to_grammar(StructuredSpec.json_schema(s))) for s in distinct_schemas(64, 0)]
    words = -(-args.vocab // 32)
    print(f"device {torch.cuda.get_device_name(device)}, vocab {args.vocab}")
    for rows in (1, 64):
        matchers = [xgr.GrammarMatcher(compiled[i]) for i in range(rows)]
        masks = GrammarMasks(device)
        host = masks.host_buffer(rows, words)
        filler = xgr.BatchGrammarMatcher(max_threads="auto")
        logits = torch.randn(rows, args.vocab, device=device, dtype=torch.bfloat16)
        on_device = host.to(device)
        figures = {
            "matcher creation (each)": timed(lambda: xgr.GrammarMatcher(compiled[0])),
            "fill, one matcher's own call (each)": timed(lambda: [m.fill_next_token_bitmask(host, i) for i, m in enumerate(matchers)]) / rows,
            "fill, batch filler (whole batch)": timed(lambda: filler.batch_fill_next_token_bitmask(matchers, host, list(range(rows)))),
            "copy to device + event": timed(lambda: masks.to_device(masks.host_buffer(rows, words))),
            "apply, xgrammar triton": timed(lambda: xgr.apply_token_bitmask_inplace(logits, on_device)),
            "apply, torch ops": timed(lambda: apply_bitmask(logits, on_device)),
            "apply, xgrammar triton, drained": timed(lambda: xgr.apply_token_bitmask_inplace(logits, on_device), sync=True),
            "apply, torch ops, drained": timed(lambda: apply_bitmask(logits, on_device), sync=True),
        }
        torch.cuda.synchronize()
        for name, us in figures.items():
            print(f"rows {rows:>3}  {name:<42}{us:>10.1f} us")


if __name__ == "__main__":
    main()
