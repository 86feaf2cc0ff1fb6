"""A verify step under a grammar: each draft position's row masked by the grammar advanced through the
draft tokens before it, the matcher left where it was, and a refused draft token masked at its own row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import xgrammar as xgr

from engine.structured.bitmask import GrammarMasks, apply_draft_grammars
from engine.structured.compiler import GrammarCompilerPool
from engine.structured.spec import StructuredSpec
from engine.tokenizer import Tokenizer


@pytest.fixture
def grammars(tiny_checkpoint):
    tokenizer = Tokenizer(tiny_checkpoint)
    pool = GrammarCompilerPool(tokenizer.hf, len(tokenizer.hf), tokenizer.eos_token_ids)

    def make(spec: StructuredSpec):
        grammar = pool.grammar_for(spec)
        grammar.wait(30)
        return grammar

    yield tokenizer, make
    pool.shutdown()


def _id(tokenizer, text: str) -> int:
    (token,) = tokenizer.hf.encode(text, add_special_tokens=False)
    return token


def _allowed(mask: torch.Tensor, row: int, vocab: int) -> torch.Tensor:
    logits = torch.zeros(1, vocab)
    xgr.apply_token_bitmask_inplace(logits, mask[row : row + 1])
    return torch.isfinite(logits[0])


def test_each_row_is_the_grammar_after_the_draft_tokens_before_it(grammars):
    tokenizer, make = grammars
    vocab = len(tokenizer.hf)
    grammar = make(StructuredSpec("regex", "ab[0-9]"))
    a, b, seven, x = (_id(tokenizer, t) for t in ("a", "b", "7", "x"))
    mask = xgr.allocate_token_bitmask(4, vocab)
    assert grammar.verifies_drafts
    assert grammar.fill_draft_masks([a, b, seven], mask, 0) == 3
    assert _allowed(mask, 0, vocab)[a] and not _allowed(mask, 0, vocab)[b]
    assert _allowed(mask, 1, vocab)[b] and not _allowed(mask, 1, vocab)[a]
    assert _allowed(mask, 2, vocab)[seven] and not _allowed(mask, 2, vocab)[x]
    assert not _allowed(mask, 3, vocab)[seven]  # after "ab7" only the end may follow
    # the matcher is where it was: the first row again
    again = xgr.allocate_token_bitmask(1, vocab)
    assert grammar.fill_draft_masks([], again, 0) == 0
    assert torch.equal(again[0], mask[0])
    assert grammar.accept(a) and grammar.accept(b)  # and it still accepts from the start


def test_a_refused_draft_token_stops_the_rows_and_is_masked_at_its_own(grammars):
    tokenizer, make = grammars
    vocab = len(tokenizer.hf)
    grammar = make(StructuredSpec("regex", "ab[0-9]"))
    a, b, x, seven = (_id(tokenizer, t) for t in ("a", "b", "x", "7"))
    mask = xgr.allocate_token_bitmask(4, vocab)
    mask.fill_(-1)
    assert grammar.fill_draft_masks([a, x, seven], mask, 0) == 1
    assert _allowed(mask, 1, vocab)[b] and not _allowed(mask, 1, vocab)[x]  # x refused at its row
    assert bool(_allowed(mask, 2, vocab).all())  # past it: left as it was (a spare row)
    assert grammar.accept(a)  # rolled back: "a" is still the first token


def test_a_verify_step_masks_drafting_and_single_row_requests_and_leaves_free_rows(grammars):
    tokenizer, make = grammars
    vocab = len(tokenizer.hf)
    a, b, seven = (_id(tokenizer, t) for t in ("a", "b", "7"))
    drafting = make(StructuredSpec("regex", "ab[0-9]"))
    single = make(StructuredSpec.choice(["yes", "no"]))
    scheduled = [
        SimpleNamespace(request=SimpleNamespace(grammar=drafting), num_draft_tokens=2, draft_token_ids=[a, b]),
        SimpleNamespace(request=SimpleNamespace(grammar=None), num_draft_tokens=1, draft_token_ids=[seven]),
        SimpleNamespace(request=SimpleNamespace(grammar=single), num_draft_tokens=0, draft_token_ids=[]),
    ]
    logits = torch.zeros(3 + 2 + 1, vocab)
    apply_draft_grammars(logits, scheduled, GrammarMasks(torch.device("cpu")))
    allowed = torch.isfinite(logits)
    assert allowed[0, a] and not allowed[0, b]  # the drafting request's rows 0-2
    assert allowed[1, b] and not allowed[1, a]
    assert allowed[2, seven] and not allowed[2, a]
    assert bool(allowed[3].all() and allowed[4].all())  # the free request's two rows
    assert 0 < int(allowed[5].sum()) < vocab and not allowed[5, seven]  # "yes" or "no" only


def test_without_an_active_grammar_nothing_is_masked(grammars):
    scheduled = [SimpleNamespace(request=SimpleNamespace(grammar=None), num_draft_tokens=2, draft_token_ids=[1, 2])]
    logits = torch.zeros(3, 16)
    apply_draft_grammars(logits, scheduled, GrammarMasks(torch.device("cpu")))
    assert bool(torch.isfinite(logits).all())
