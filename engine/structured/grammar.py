"""One request's grammar state: the compiled grammar (maybe still compiling) and its matcher."""

from __future__ import annotations

from concurrent.futures import Future

from engine.structured.thinking_budget import BudgetCounter


class RequestGrammar:
    """``reasoning_end_id``: the grammar starts to apply once the model has sampled this token (the
    end of its reasoning); until then the request samples freely. ``budget``: a thinking budget, which
    forces that token once spent. ``compiled`` may hold None: a budget without a grammar."""

    def __init__(
        self,
        compiled: Future,
        vocab_size: int,
        reasoning_end_id: int | None = None,
        budget: BudgetCounter | None = None,
    ) -> None:
        self._compiled = compiled
        self._matcher = None
        self.vocab_size = vocab_size
        self.reasoning_end_id = reasoning_end_id
        self.in_reasoning = reasoning_end_id is not None
        self.budget = budget
        self._fresh = True  # the matcher has accepted nothing: it is in the grammar's start state

    @property
    def forced_token(self) -> int | None:
        """The one token this step may sample (a spent thinking budget's end marker), or None."""
        return None if self.budget is None else self.budget.forced_token

    @property
    def ready(self) -> bool:
        """Whether the scheduler may run the request: its grammar is compiled (or failed)."""
        return self._compiled.done()

    @property
    def error(self) -> str | None:
        if not self._compiled.done() or self._compiled.exception() is None:
            return None
        return str(self._compiled.exception())

    @property
    def active(self) -> bool:
        """Whether this step's token is constrained."""
        if self.forced_token is not None:
            return True
        return not self.in_reasoning and self._grammar() is not None and not self.terminated

    def _grammar(self):
        """The compiled grammar (``CompiledGrammar``), or None while compiling, failed or absent."""
        if not self._compiled.done() or self._compiled.exception() is not None:
            return None
        return self._compiled.result()

    @property
    def matcher(self):
        if self._matcher is None:
            compiled = self._grammar()
            if compiled is None:
                return None
            import xgrammar as xgr

            self._matcher = xgr.GrammarMatcher(compiled.grammar)
        return self._matcher

    @property
    def first_mask(self):
        """The bitmask row of the grammar's start state (computed once per compiled grammar) while
        this step is the grammar's first: the row needs no matcher to fill it."""
        if not self._fresh or self.in_reasoning or self.forced_token is not None:
            return None
        compiled = self._grammar()
        return None if compiled is None else compiled.first_mask

    def accept(self, token_id: int) -> bool:
        """Advance past a sampled token; False when the grammar refuses it."""
        if self.budget is not None:
            self.budget.accept(token_id)
        if self.in_reasoning:
            if token_id == self.reasoning_end_id:
                self.in_reasoning = False
            return True
        if self.matcher is None or self._matcher.is_terminated():
            return True
        self._fresh = False
        return self._matcher.accept_token(token_id)

    @property
    def plain_matcher(self):
        """The matcher when ``accept`` would only pass the token to it (past reasoning, compiled,
        not terminated), else None: such tokens may be accepted in a batch (``accept_tokens``)."""
        if self.in_reasoning or self.matcher is None or self._matcher.is_terminated():
            return None
        if self.budget is not None and self.budget.state == "counting":
            return None
        return self._matcher

    @property
    def verifies_drafts(self) -> bool:
        """Whether a speculative draft may be verified under this grammar this step: its tokens are
        only matched (``plain_matcher``: past reasoning, compiled, not terminated, no thinking budget
        counting) and no token is forced."""
        return self.plain_matcher is not None and self.forced_token is None

    def fill_draft_masks(self, draft: list[int], mask, row: int) -> int:
        """Rows ``row`` .. ``row + len(draft)`` of ``mask``: the tokens allowed after the tokens
        before each draft position (the state now, then after ``draft[:1]``, ...), as a verify step
        samples them. Returns how many draft tokens the grammar accepts in order; the rows past the
        first one it refuses are left as they were (that token is masked at its own row, so
        verification stops there), and the matcher is rolled back to where it was."""
        matcher = self.plain_matcher
        matcher.fill_next_token_bitmask(mask, row)
        valid = 0
        for token in draft:
            if matcher.is_terminated() or not matcher.accept_token(token):
                break
            valid += 1
            if not matcher.is_terminated():  # after a stop token nothing may follow: that row is spare
                matcher.fill_next_token_bitmask(mask, row + valid)
        if valid:
            matcher.rollback(valid)
        return valid

    @property
    def terminated(self) -> bool:
        """The grammar has accepted a stop token: nothing more may follow."""
        return self._matcher is not None and self._matcher.is_terminated()

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds for the compilation (only when the engine is idle)."""
        try:
            self._compiled.exception(timeout=timeout)
        except TimeoutError:
            pass


def accept_tokens(grammars: list[RequestGrammar], tokens: list[int]) -> list[bool]:
    """``RequestGrammar.accept`` for each pair, the plain matchers' tokens in one C++ call."""
    accepted = [True] * len(grammars)
    batch, batch_rows = [], []
    for row, (grammar, token) in enumerate(zip(grammars, tokens, strict=True)):
        matcher = grammar.plain_matcher
        if matcher is None:  # reasoning, its end token, a terminated or failed grammar
            accepted[row] = grammar.accept(token)
        else:
            grammar._fresh = False
            batch.append(matcher)
            batch_rows.append(row)
    if batch:
        import xgrammar as xgr

        results = xgr.BatchGrammarMatcher.batch_accept_token(batch, [tokens[row] for row in batch_rows])
        for row, ok in zip(batch_rows, results, strict=True):
            accepted[row] = ok
    return accepted
