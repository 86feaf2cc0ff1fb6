"""Batched sampling on the model's device.

Every row is processed independently (row-wise sort, softmax, penalties), and random draws come from
the request's own torch.Generator, so a seeded request's tokens depend only on (prompt, params, seed),
never on its batch neighbours. That holds exactly when the logits themselves are batch-invariant:
fp32 on CPU is; on GPU, matmul/attention kernels may pick different reduction orders per batch
size, so bit-identical output across batch shapes needs a batch-invariant kernel mode there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.sampling.params import SamplingParams


@dataclass
class Logprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class SamplingState:
    """What the sampler needs to know about one request this step."""

    params: SamplingParams
    generator: torch.Generator | None
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    banned_token_ids: list[int] = field(default_factory=list)  # eos/stop ids while under min_tokens


def num_outputs_before(request) -> int:
    """How many output tokens precede the one this step samples for ``request``: those on the host
    plus those still on the device (``num_output_placeholders`` counts this step's own as well)."""
    return len(request.output_token_ids) + request.num_output_placeholders - 1


def greedy_only(requests: list) -> bool:
    """Whether every request takes the plain argmax: greedy, no penalties, logprobs or banned ids."""
    for r in requests:
        p = r.sampling_params
        if not p.greedy or p.needs_penalties or p.logprobs is not None:
            return False
        if r.min_tokens and num_outputs_before(r) < r.min_tokens:
            return False
    return True


def sample(logits: torch.Tensor, states: list[SamplingState]) -> tuple[list[int], list[Logprob | None]]:
    """logits: fp32 [S, V], one row per state. Returns chosen token ids and per-row logprobs."""
    raw_logprobs = None
    if any(s.params.logprobs is not None for s in states):
        raw_logprobs = torch.log_softmax(logits, dim=-1)
    token_ids = choose_tokens(logits, states).tolist()
    logprobs: list[Logprob | None] = [None] * len(states)
    if raw_logprobs is not None:
        for row, s in enumerate(states):
            if s.params.logprobs is None:
                continue
            lp = raw_logprobs[row]
            top = []
            if s.params.logprobs > 0:
                values, ids = lp.topk(s.params.logprobs)
                top = list(zip(ids.tolist(), values.tolist(), strict=True))
            logprobs[row] = Logprob(token_ids[row], float(lp[token_ids[row]]), top)
    return token_ids, logprobs


def choose_tokens(logits: torch.Tensor, states: list[SamplingState]) -> torch.Tensor:
    """The chosen id of every row as a device tensor: nothing is read back to the host."""
    logits = logits.clone()
    for row, s in enumerate(states):
        if s.params.needs_penalties:
            _apply_penalties(logits[row], s)
        if s.banned_token_ids:
            logits[row, s.banned_token_ids] = float("-inf")

    chosen = torch.empty(len(states), dtype=torch.long, device=logits.device)
    greedy_rows = [i for i, s in enumerate(states) if s.params.greedy]
    random_rows = [i for i, s in enumerate(states) if not s.params.greedy]
    if greedy_rows:
        chosen[greedy_rows] = logits[greedy_rows].argmax(dim=-1)
    if random_rows:
        chosen[random_rows] = _sample_random(logits[random_rows], [states[i] for i in random_rows])
    return chosen


def _apply_penalties(row: torch.Tensor, s: SamplingState) -> None:
    p = s.params
    device = row.device
    if p.repetition_penalty != 1.0:
        # HF convention: over prompt and output tokens; shrink positive logits, grow negative ones.
        seen = torch.tensor(
            sorted(set(s.prompt_token_ids) | set(s.output_token_ids)), dtype=torch.long, device=device
        )
        if seen.numel():
            vals = row[seen]
            row[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if (p.frequency_penalty or p.presence_penalty) and s.output_token_ids:
        # OpenAI convention: over generated tokens only.
        out = torch.tensor(s.output_token_ids, dtype=torch.long, device=device)
        counts = torch.bincount(out, minlength=row.numel())[: row.numel()].to(row.dtype)
        row -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(row.dtype)


def _sample_random(logits: torch.Tensor, states: list[SamplingState]) -> torch.Tensor:
    temps = torch.tensor([s.params.temperature for s in states], dtype=logits.dtype, device=logits.device)
    logits = logits / temps[:, None]
    vocab = logits.shape[-1]
    top_ks = [s.params.top_k if 0 < s.params.top_k < vocab else vocab for s in states]
    top_ps = [s.params.top_p for s in states]
    if any(k < vocab for k in top_ks) or any(p < 1.0 for p in top_ps):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab, device=logits.device)[None, :]
        k = torch.tensor(top_ks, device=logits.device)[:, None]
        sorted_logits = sorted_logits.masked_fill(ranks >= k, float("-inf"))
        sorted_probs = sorted_logits.softmax(dim=-1)
        before = _row_cumsum(sorted_probs) - sorted_probs  # mass strictly above each token
        p = torch.tensor(top_ps, dtype=logits.dtype, device=logits.device)[:, None]
        sorted_logits = sorted_logits.masked_fill(before > p, float("-inf"))  # the top token always stays
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = logits.softmax(dim=-1)
    min_ps = [s.params.min_p for s in states]
    if any(m > 0 for m in min_ps):
        m = torch.tensor(min_ps, dtype=probs.dtype, device=probs.device)[:, None]
        probs = probs.masked_fill(probs < m * probs.max(dim=-1, keepdim=True).values, 0.0)
    # Exponential race (Gumbel-max in disguise): argmax p_i / E_i with E_i ~ Exp(1) samples from p.
    noise = torch.stack([_exponential(vocab, s.generator, probs.device) for s in states])
    return (probs / noise).argmax(dim=-1)


def _row_cumsum(x: torch.Tensor) -> torch.Tensor:
    """``x.cumsum(-1)`` of ``x: [S, V]``, a lone row scanned by the kernel that scans a batch's rows:
    on CUDA torch scans a single row with CUB's device-wide scan and several rows with its per-row
    kernel, which add in different orders, so a top-p row's bits would follow the batch size."""
    if x.shape[0] == 1 and x.is_cuda:
        return x.expand(2, -1).contiguous().cumsum(dim=-1)[:1]
    return x.cumsum(dim=-1)


def _exponential(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    return torch.empty(n, device=device).exponential_(generator=generator)
