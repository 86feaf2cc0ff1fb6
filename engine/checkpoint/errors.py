from __future__ import annotations

from pathlib import Path


class CheckpointError(ValueError):
    """A model directory that cannot be served; the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")
