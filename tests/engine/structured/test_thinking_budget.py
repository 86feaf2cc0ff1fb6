"""Thinking budgets in the engine: the reasoning end marker is forced as the token after the
budget's last reasoning token (tiny random model, CPU, with and without async scheduling), a grammar
applies after it, and the counter and bitmask pieces on their own."""

from __future__ import annotations

import re

import pytest
import torch

from engine import LLM, SamplingParams
from engine.sampling.params import ThinkingBudget
from engine.structured.bitmask import allow_only
from engine.structured.spec import StructuredSpec
from engine.structured.thinking_budget import BudgetCounter


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def llm(request, tiny_checkpoint):
    return LLM(tiny_checkpoint, device="cpu", dtype="float32", async_scheduling=request.param)


def _marker(llm) -> tuple[str, int]:
    """A plain vocabulary token standing in for </think> (the tiny tokenizer has none)."""
    vocab = llm.engine.tokenizer.hf.get_vocab()
    token = sorted(t for t in vocab if re.fullmatch("Ġ[a-z]{3,}", t))[0]
    return token, vocab[token]


def test_the_end_marker_follows_the_budget(llm):
    marker, marker_id = _marker(llm)
    params = [
        SamplingParams(
            max_tokens=12, temperature=1.0, seed=seed, thinking_budget=ThinkingBudget(budget, marker)
        )
        for seed, budget in enumerate((1, 3, 6, 3))
    ]
    for out, p in zip(llm.generate(["Once upon a time"] * len(params), params), params, strict=True):
        ids = out.token_ids
        end = ids.index(marker_id)  # the model may end it itself, never later than the budget
        assert end <= p.thinking_budget.tokens, (ids, p.thinking_budget)


def test_a_grammar_applies_after_a_budgeted_reasoning(llm):
    marker, marker_id = _marker(llm)
    budget = ThinkingBudget(2, marker)
    spec = StructuredSpec("regex", "[a-c]{3}").after_reasoning(marker)
    [out] = llm.generate(
        ["Once upon a time"],
        SamplingParams(max_tokens=20, temperature=1.0, seed=0, structured=spec, thinking_budget=budget),
    )
    end = out.token_ids.index(marker_id)
    assert end <= 2 and out.finish_reason == "stop"
    answer = llm.engine.tokenizer.hf.decode(out.token_ids[end + 1 :], skip_special_tokens=True)
    assert re.fullmatch("[a-c]{3}", answer), answer


def test_the_counter_waits_for_the_reply_to_open_the_block():
    counter = BudgetCounter(limit=2, end_id=9, start_id=7)
    for token in (5, 5, 5):  # before <think>: not counted
        assert counter.forced_token is None
        counter.accept(token)
    counter.accept(7)
    counter.accept(5)
    assert counter.forced_token is None
    counter.accept(6)
    assert counter.forced_token == 9
    counter.accept(9)
    assert counter.state == "done" and counter.forced_token is None
    counter.accept(7)  # a second <think> opens nothing
    assert counter.state == "done"
    with pytest.raises(ValueError, match="not one token"):
        BudgetCounter.from_budget(ThinkingBudget(3, "</think>"), {"<think>": 1})


@pytest.mark.parametrize("token", [0, 5, 31, 32, 63, 95])
def test_allow_only_sets_one_bit(token):
    row = torch.full((3,), -1, dtype=torch.int32)
    allow_only(row, token)
    bits = [(int(row[i // 32]) >> (i % 32)) & 1 for i in range(96)]
    assert bits == [int(i == token) for i in range(96)]


def test_budget_must_be_a_positive_integer():
    for tokens in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="thinking_budget"):
            ThinkingBudget(tokens, "</think>")
    with pytest.raises(ValueError, match="thinking_budget"):
        SamplingParams(thinking_budget=3)
