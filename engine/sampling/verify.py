"""Verify a draft against the target model's logits at every draft position (speculative decoding).

Every proposer drafts deterministically (n-gram lookup, or the argmax of a draft model or of the MTP
head), so a draft is a point mass q = 1 at the drafted token. Rejection sampling with such a q
accepts drafted token d with probability min(1, p(d) / q(d)) = p(d) and on rejection samples from
the residual (p - q)+, i.e. p without d, renormalised. Sampling x ~ p at the position and keeping d
exactly when x == d does both at once: P(keep d) = p(d), and a rejected position emits x, which is
distributed as p conditioned on x != d. So each position is sampled exactly as a step without
speculation would sample it (same processed logits: temperature, top-k, top-p, min-p, penalties over
the history including the accepted draft tokens, banned ids under min_tokens), with the request's own
generator consumed once per emitted token, in order: a seeded request gives the same tokens with
speculation on or off, whatever the draft lengths were.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.sampling.sampler import SamplingState, choose_tokens


def verify_draft(
    logits: torch.Tensor | None,
    draft: list[int],
    state_at: Callable[[int], SamplingState] | None,
    argmax: list[int] | None = None,
) -> list[int]:
    """Tokens a request emits: the longest accepted prefix of ``draft`` and one more token.

    ``logits``: fp32 [len(draft) + 1, V], row i the target's logits after the first i draft tokens.
    ``state_at(i)``: the sampling state at row i (its history extended by ``draft[:i]``); None for
    a plain greedy request, which takes the argmax of every row (``argmax``, when the caller read
    them for the whole batch at once, saves a device sync per request)."""
    if state_at is None:
        chosen = argmax if argmax is not None else logits.argmax(dim=-1).tolist()
        emitted = []
        for i, token in enumerate(chosen):
            emitted.append(token)
            if i == len(draft) or token != draft[i]:
                break
        return emitted
    emitted = []
    for i in range(len(draft) + 1):
        token = int(choose_tokens(logits[i : i + 1], [state_at(i)])[0])
        emitted.append(token)
        if i == len(draft) or token != draft[i]:
            break
    return emitted


def verify_forced(
    logits: torch.Tensor | None,
    draft: list[int],
    state_at: Callable[[int], SamplingState] | None,
    argmax: list[int] | None,
    accepted: int,
) -> list[int]:
    """Benchmarks only (the runner's ``acceptance_override``): the first ``accepted`` draft tokens,
    whatever the target says of them, then the target's own token at the next row, chosen as
    ``verify_draft`` chooses it (argmax for a plain greedy request, else sampled)."""
    if state_at is None:
        token = argmax[accepted] if argmax is not None else int(logits[accepted].argmax())
    else:
        token = int(choose_tokens(logits[accepted : accepted + 1], [state_at(accepted)])[0])
    return [*draft[:accepted], token]
