"""A process-wide choice among a few named modes, set once when an engine builds (``engine/switches.py``).

Torch-free, so that both the kernels and the engine's layers and collectives may keep one.
"""

from __future__ import annotations


class ModeSwitch:
    """``set`` checks the choice and returns the previous one (so a test can put it back)."""

    def __init__(self, name: str, modes: tuple[str, ...], default: str = "auto") -> None:
        self.name = name
        self.modes = modes
        self.mode = default

    def set(self, mode: str) -> str:
        if mode not in self.modes:
            raise ValueError(f"{self.name} mode {mode!r} is not one of {', '.join(self.modes)}")
        previous, self.mode = self.mode, mode
        return previous
