"""Our engine and transformers in alternating rounds of the static-batch workload, both loaded at
once (``chassis bench engine --compare hf --rounds N``).

Run one after the other, the two engines see different machines when the load moves between them
(a shared 2-core VM's speed moved by 20-40 % within minutes, docs/performance.md): each round here
times ours, then transformers, on fresh prompts, and the figures are the rounds' medians, with the
median of the rounds' ratios beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from statistics import median


def alternate(runs: dict[str, Callable[[int], float]], rounds: int, first: int = 0) -> Iterator[dict[str, float]]:
    """Each round runs every one of ``runs`` once, in order, given the round's index (for fresh
    prompts; ``first``: the first round's, to extend earlier rounds), and yields their figures."""
    for round_ in range(first, first + rounds):
        yield {name: run(round_) for name, run in runs.items()}


def median_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median of the rounds' ratios: each round's two runs saw the same load."""
    return median(o / t for o, t in zip(ours, theirs, strict=True))


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
        runs = {
            # seed per round: fresh prompts, so no round hits the prefix cache of another
            "engine": lambda r, size=size: wl.static_batch(
                llm, vocab, size, prompt_len, output_len, seed=1000 * r
            ).figures["output_tokens_per_s"],
            "transformers": lambda r, size=size: (
                time_generate(
                    hf_model, size, prompt_len, output_len, device, seed=1000 * r
                ).output_tokens_per_s
            ),
        }
        ours, theirs = [], []
        for round_, rate in enumerate(alternate(runs, rounds)):
            ours.append(rate["engine"])
            theirs.append(rate["transformers"])
            say(
                f"batch {size}, round {round_ + 1}: engine {ours[-1]:,.2f}, transformers {theirs[-1]:,.2f} out tok/s"
            )
        rates[size] = (ours, theirs)
        figures[f"engine_static_batch_bs{size}_output_tokens_per_s"] = median(ours)
        figures[f"hf_static_bs{size}_output_tokens_per_s"] = median(theirs)
        figures[f"ratio_static_bs{size}_vs_hf_round_median"] = median_ratio(ours, theirs)
    if 1 in rates:  # what batching buys against one stream of transformers, round by round
        single = rates[1][1]
        for size, (ours, _) in rates.items():
            figures[f"ratio_static_bs{size}_vs_hf_bs1_round_median"] = median_ratio(ours, single)
    return figures
