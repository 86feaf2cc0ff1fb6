"""A request's first constrained step copies the start state's bitmask row computed with its compiled
grammar; later steps fill their rows from the matcher."""

from __future__ import annotations

import torch
import xgrammar as xgr

from engine.structured.bitmask import GrammarMasks, apply_grammars
from engine.structured.compiler import GrammarCompilerPool
from engine.structured.spec import StructuredSpec
from engine.tokenizer import Tokenizer


class _Request:
    def __init__(self, grammar) -> None:
        self.grammar = grammar


def test_the_first_step_copies_the_start_rows_and_later_steps_fill(tiny_checkpoint):
    tokenizer = Tokenizer(tiny_checkpoint)
    vocab = len(tokenizer.hf)
    pool = GrammarCompilerPool(tokenizer.hf, vocab, tokenizer.eos_token_ids)
    try:
        specs = [StructuredSpec("regex", "[0-9]{3}"), StructuredSpec.choice(["yes", "no"])]
        requests = [_Request(pool.grammar_for(spec)) for spec in specs]
        for request in requests:
            request.grammar.wait(30)
        starts = [xgr.allocate_token_bitmask(1, vocab) for _ in specs]
        for start, spec in zip(starts, specs, strict=True):
            xgr.GrammarMatcher(pool.compiled(spec).result().grammar).fill_next_token_bitmask(start)

        masks, filled = GrammarMasks(torch.device("cpu")), []
        masks.fill = lambda matchers, mask, rows: filled.append(list(rows))  # only to count the fills
        logits = torch.zeros(len(requests), vocab)
        apply_grammars(logits, requests, masks)
        assert filled == []  # both rows came from the compiled grammars
        for row, start in enumerate(starts):
            allowed = torch.isfinite(logits[row])
            expected = torch.zeros(1, vocab)
            xgr.apply_token_bitmask_inplace(expected, start)
            assert torch.equal(allowed, torch.isfinite(expected[0]))

        digit = tokenizer.hf.convert_tokens_to_ids(
            next(t for t in tokenizer.hf.get_vocab() if t in "0123456789")
        )
        assert requests[0].grammar.accept(digit)
        assert requests[0].grammar.first_mask is None and requests[1].grammar.first_mask is not None
        apply_grammars(torch.zeros(len(requests), vocab), requests, masks)
        assert filled == [[0]]  # the advanced row is filled by its matcher, the other still copied
    finally:
        pool.shutdown()
