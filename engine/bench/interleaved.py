"""Our engine and transformers in alternating rounds of the static-batch workload, both loaded at
once (``chassis bench engine --compare hf --rounds N``).

Run one after the other, the two engines see different machines when the load moves between them
(a shared 2-core VM's speed moved by 20-40 % within minutes, docs/performance.md): each round here
times ours, then transformers, on fresh prompts, and the figures are the rounds' medians, with the
median of the rounds' ratios beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median


def interleaved_static_batch(
    llm,
    hf_model,
    vocab: int,
    sizes: tuple[int, ...],
    prompt_len: int,
    output_len: int,
    rounds: int,
    device: str,
    say: Callable[[str], None] = print,
) -> dict[str, float]:
    from engine.bench import workloads as wl
    from engine.bench.hf_baseline import time_generate

    figures: dict[str, float] = {}
    rates: dict[int, tuple[list[float], list[float]]] = {}
    for size in sizes:
        ours, theirs = [], []
        for round_ in range(rounds):
            seed = 1000 * round_  # fresh prompts: no round hits the prefix cache of another
            result = wl.static_batch(llm, vocab, size, prompt_len, output_len, seed=seed)
            ours.append(result.figures["output_tokens_per_s"])
            theirs.append(
                time_generate(hf_model, size, prompt_len, output_len, device, seed=seed).output_tokens_per_s
            )
            say(
                f"batch {size}, round {round_ + 1}: engine {ours[-1]:,.2f}, transformers {theirs[-1]:,.2f} out tok/s"
            )
        rates[size] = (ours, theirs)
        figures[f"engine_static_batch_bs{size}_output_tokens_per_s"] = median(ours)
        figures[f"hf_static_bs{size}_output_tokens_per_s"] = median(theirs)
        figures[f"ratio_static_bs{size}_vs_hf_round_median"] = median(
            o / t for o, t in zip(ours, theirs, strict=True)
        )
    if 1 in rates:  # what batching buys against one stream of transformers, round by round
        single = rates[1][1]
        for size, (ours, _) in rates.items():
            figures[f"ratio_static_bs{size}_vs_hf_bs1_round_median"] = median(
                o / t for o, t in zip(ours, single, strict=True)
            )
    return figures
