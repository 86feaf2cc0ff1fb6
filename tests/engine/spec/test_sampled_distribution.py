"""Sampled verification keeps the target distribution.

A chi-square test over a six-token vocabulary and 20,000 seeds checks the tokens ``verify_draft``
emits at the first draft position and, after an accepted first token, at the second (whose
frequency penalty counts that accepted draft token), against distributions computed here by hand,
for positions sampled in order and for every position sampled up front (the runner's rule for
unseeded requests: one device read per step).
Seeds are fixed, so the test is deterministic; a correct rule would fail it with probability below
1e-6 (two tests at 1e-7 each), and a deliberately wrong rule (on rejection, resample from the target
instead of from the residual) fails it by a wide margin. End to end, a seeded request gives the
same tokens with speculation on and off, for every sampling setting, and the same text twice (the
second time with its verify steps through the decode graphs' path)."""

import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.sampling.sampler import SamplingState, choose_tokens
from engine.sampling.verify import verify_draft

SEEDS = 20_000
SIGNIFICANCE = 1e-7
LOGITS = torch.tensor(
    [[1.0, 0.2, 1.4, -0.5, 0.7, 0.0], [0.3, 1.1, 0.9, 1.2, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
)
DRAFT = [2, 3]
PARAMS = SamplingParams(temperature=0.8, top_k=5, frequency_penalty=0.5)


def _target(row: int, history: list[int]) -> torch.Tensor:
    """The target's distribution at ``row``, computed independently of the sampler."""
    logits = LOGITS[row].clone()
    for token in history:
        logits[token] -= PARAMS.frequency_penalty
    logits = logits / PARAMS.temperature
    kept = logits.topk(PARAMS.top_k).indices
    masked = torch.full_like(logits, float("-inf"))
    masked[kept] = logits[kept]
    return masked.softmax(dim=-1)


def _state(generator, history):
    return SamplingState(PARAMS, generator, prompt_token_ids=[], output_token_ids=list(history))


def _correct(generator):
    return verify_draft(LOGITS, DRAFT, lambda i: _state(generator, DRAFT[:i]))


def _resamples_from_the_target(generator):
    """Wrong: a rejected position samples from p again instead of from the residual (p - q)+."""
    emitted = []
    for i, drafted in enumerate(DRAFT):
        token = int(choose_tokens(LOGITS[i : i + 1], [_state(generator, DRAFT[:i])])[0])
        if token != drafted:
            emitted.append(int(choose_tokens(LOGITS[i : i + 1], [_state(generator, DRAFT[:i])])[0]))
            return emitted
        emitted.append(token)
    return emitted


def _p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    assert counts[probs == 0].sum() == 0, "a token the target never samples was emitted"
    keep = probs > 0
    expected = probs[keep] * counts.sum()
    statistic = ((counts[keep] - expected) ** 2 / expected).sum()
    dof = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), statistic / 2.0))


def _p_values(verify) -> tuple[float, float]:
    return _p_values_of(verify(torch.Generator().manual_seed(seed)) for seed in range(SEEDS))


def _p_values_of(emissions) -> tuple[float, float]:
    first = torch.zeros(6, dtype=torch.float64)
    second = torch.zeros(6, dtype=torch.float64)
    for emitted in emissions:
        first[emitted[0]] += 1
        if emitted[0] == DRAFT[0] and len(emitted) > 1:  # accepted: the next position was sampled
            second[emitted[1]] += 1
    return _p_value(first, _target(0, [])), _p_value(second, _target(1, DRAFT[:1]))


def test_rejection_sampling_keeps_the_target_distribution():
    first, second = _p_values(_correct)
    assert first > SIGNIFICANCE and second > SIGNIFICANCE


def test_sampling_every_position_up_front_keeps_the_target_distribution():
    """The runner's rule for unseeded requests: every position sampled in one call (one device read
    per step), the positions after the first rejection dropped. One call for all draws here."""
    generator = torch.Generator().manual_seed(0)
    states = [_state(generator, DRAFT[:i]) for _ in range(SEEDS) for i in range(len(DRAFT) + 1)]
    chosen = choose_tokens(LOGITS.repeat(SEEDS, 1), states).view(SEEDS, -1).tolist()
    first, second = _p_values_of(verify_draft(None, DRAFT, None, row) for row in chosen)
    assert first > SIGNIFICANCE and second > SIGNIFICANCE


def test_the_chi_square_test_catches_a_wrong_acceptance_rule():
    first, _ = _p_values(_resamples_from_the_target)
    assert first < SIGNIFICANCE


def _prompts(n, seed=11):
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        phrase = [rng.randrange(3, 300) for _ in range(rng.randrange(3, 7))]
        prompts.append([rng.randrange(3, 300) for _ in range(rng.randrange(1, 10))] + phrase * 3)
    return prompts


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=24, temperature=0.3, seed=1, ignore_eos=True),
        SamplingParams(max_tokens=24, temperature=0.8, top_p=0.7, top_k=20, seed=2, ignore_eos=True),
        SamplingParams(max_tokens=24, temperature=0.5, min_p=0.1, repetition_penalty=1.1, seed=3),
        SamplingParams(max_tokens=24, temperature=0.4, frequency_penalty=0.3, presence_penalty=0.2, seed=4),
        SamplingParams(max_tokens=24, temperature=0.0, min_tokens=16, stop_token_ids=[138, 251]),
        SamplingParams(max_tokens=24, temperature=0.0, repetition_penalty=1.3, frequency_penalty=0.4),
    ],
    ids=[
        "temperature",
        "top-p-top-k",
        "min-p-repetition",
        "frequency-presence",
        "greedy-min-tokens",
        "greedy-penalties",  # unseeded: chosen up front with the step's one device read
    ],
)
def test_seeded_request_gives_the_same_tokens_with_speculation_on_and_off(tiny_llama, params):
    prompts = _prompts(4)
    runs = {}
    # The target drafting for itself, every draft verified: many positions accepted and rejected.
    spec = {
        "speculative_method": "draft_model",
        "speculative_model": str(tiny_llama),
        "speculative_scheduling": "fixed",
    }
    # "again" runs its verify steps through the decode graphs' path (replayed eagerly on CPU).
    for name, kwargs in (("off", {}), ("on", spec), ("again", spec)):
        llm = LLM(tiny_llama, device="cpu", dtype="float32", **kwargs)
        if name == "again":
            llm.engine.runner.capture_decode_graphs(32, eager=True)
        runs[name] = [(o.token_ids, o.text) for o in llm.generate(prompts, params)]
        if name == "again":
            assert llm.engine.runner.graphs.verify_steps_run > 0
        if name == "on":
            stats = llm.stats()
            assert stats.spec_decode_num_accepted_tokens > 0
            if not params.greedy:  # sampling rejects some of the draft model's argmax tokens
                assert stats.spec_decode_num_draft_tokens > stats.spec_decode_num_accepted_tokens
    assert runs["on"] == runs["off"] == runs["again"]
