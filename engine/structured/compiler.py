"""Grammar compilation in a background pool, cached by (grammar, tokenizer).

The engine loop only ever submits and polls: a request whose grammar is still compiling waits in
the scheduler (``RequestGrammar.ready``) while other requests run. xgrammar releases the GIL while
it compiles, so the pool's threads do not slow the loop down.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from engine.sampling.params import ThinkingBudget
from engine.structured.grammar import RequestGrammar
from engine.structured.spec import StructuredSpec, to_grammar
from engine.structured.thinking_budget import BudgetCounter

CACHE_SIZE = 1024  # compiled grammars kept (oldest dropped first)


@dataclass(frozen=True)
class CompiledGrammar:
    """xgrammar's compiled grammar and the bitmask row of its start state: a request's first
    constrained step copies that row instead of creating a matcher and filling it on the step's path."""

    grammar: object
    first_mask: torch.Tensor  # int32 words over the model's vocabulary


class GrammarCompilerPool:
    def __init__(self, hf_tokenizer, vocab_size: int, stop_token_ids: list[int], workers: int = 2) -> None:
        import xgrammar as xgr

        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            hf_tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids)
        )
        self._vocab = dict(hf_tokenizer.get_vocab())
        # Our cache sits above xgrammar's, keyed by the spec; the tokenizer is fixed per pool.
        self._compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=1, cache_enabled=False)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grammar")
        self._cache: dict[StructuredSpec, Future] = {}
        self._lock = threading.Lock()
        self.vocab_size = vocab_size

    def compiled(self, spec: StructuredSpec) -> Future:
        """A future of the compiled grammar; a cache hit returns the (maybe finished) same future."""
        key = StructuredSpec(spec.kind, spec.value)
        with self._lock:
            future = self._cache.get(key)
            if future is None:
                future = self._pool.submit(self._compile, key)
                self._cache[key] = future
                if len(self._cache) > CACHE_SIZE:
                    self._cache.pop(next(iter(self._cache)))
            return future

    def grammar_for(
        self, spec: StructuredSpec | None, budget: ThinkingBudget | None = None
    ) -> RequestGrammar:
        """A request's grammar state: its spec's grammar (None: no grammar, only a thinking budget)."""
        end_id, counter = None, None
        if spec is not None and spec.reasoning_end is not None:
            end_id = self._vocab.get(spec.reasoning_end)
            if end_id is None:
                raise ValueError(f"the reasoning end marker {spec.reasoning_end!r} is not one token")
        if budget is not None:
            counter = BudgetCounter.from_budget(budget, self._vocab)
            end_id = counter.end_id
        if spec is None:
            compiled: Future = Future()
            compiled.set_result(None)
        else:
            compiled = self.compiled(spec)
        return RequestGrammar(compiled, self.vocab_size, end_id, counter)

    def _compile(self, spec: StructuredSpec) -> CompiledGrammar:
        import xgrammar as xgr

        grammar = self._compiler.compile_grammar(to_grammar(spec))
        first = xgr.allocate_token_bitmask(1, self.vocab_size)
        xgr.GrammarMatcher(grammar).fill_next_token_bitmask(first)
        return CompiledGrammar(grammar, first[0])

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
