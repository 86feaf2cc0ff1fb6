"""The engine's step time split between the work it did, for the cost panels: each step's device
time is shared among its rows, prompt rows to ``prefill`` and generated rows (drafts and their
verification included) to ``decode``. A row costs about the same in the step's matrix products,
which dominate a step, so an equal share per row is what the step spent on it."""

from __future__ import annotations

from engine.scheduler.output import SchedulerOutput


class BusySeconds:
    def __init__(self) -> None:
        self.prefill = 0.0
        self.decode = 0.0

    def add(self, out: SchedulerOutput, seconds: float) -> None:
        rows = out.total_num_tokens
        if rows <= 0 or seconds <= 0:
            return
        prompt_rows = sum(
            _prompt_rows(s.request.num_prompt_tokens, s.start, s.num_tokens) for s in out.scheduled
        )
        self.prefill += seconds * prompt_rows / rows
        self.decode += seconds * (rows - prompt_rows) / rows

    def as_dict(self) -> dict[str, float]:
        return {"prefill": self.prefill, "decode": self.decode}


def _prompt_rows(prompt_len: int, start: int, num_tokens: int) -> int:
    """Rows of a step's slice [start, start + num_tokens) that are prompt positions."""
    return max(0, min(start + num_tokens, prompt_len) - start)
