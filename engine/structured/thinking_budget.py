"""A request's thinking budget as token ids: counts the tokens inside the reasoning block and says
when the end marker must be the next token (``engine.sampling.params.ThinkingBudget``)."""

from __future__ import annotations

from engine.sampling.params import ThinkingBudget


class BudgetCounter:
    def __init__(self, limit: int, end_id: int, start_id: int | None = None) -> None:
        self.limit, self.end_id, self.start_id = limit, end_id, start_id
        self.used = 0
        # "waiting" for the reply to open the block, "counting" inside it, "done" once it closed
        self.state = "counting" if start_id is None else "waiting"

    @staticmethod
    def from_budget(budget: ThinkingBudget, vocab: dict[str, int]) -> BudgetCounter:
        """ValueError (a 400) when a marker is not one token: the budget could not be enforced."""
        ids = []
        for marker in (budget.end, budget.start):
            if marker is not None and marker not in vocab:
                raise ValueError(
                    f"the reasoning marker {marker!r} is not one token; a thinking budget needs it"
                )
            ids.append(None if marker is None else vocab[marker])
        return BudgetCounter(budget.tokens, ids[0], ids[1])

    @property
    def forced_token(self) -> int | None:
        """The end marker once the budget is spent, else None (the model samples freely)."""
        return self.end_id if self.state == "counting" and self.used >= self.limit else None

    def accept(self, token_id: int) -> None:
        if self.state == "waiting":
            if token_id == self.start_id:
                self.state = "counting"
        elif self.state == "counting":
            if token_id == self.end_id:
                self.state = "done"
            else:
                self.used += 1
