"""Whether this process runs the batch-invariant kernels (``EngineConfig.batch_invariant``).

Set once by ``engine/switches.py`` when an engine builds; read by the layers that dispatch a
product or an attention call (``linear.py``, ``attention.py``). Where Triton does not run (CPU,
NPU) the layers keep their torch paths, whose rows are computed one sequence at a time already.
"""

from __future__ import annotations

from kernels.mode_switch import ModeSwitch

_switch = ModeSwitch("batch_invariant", ("off", "on"), default="off")


def set_batch_invariant(on: bool) -> bool:
    """Turn the mode on or off in this process; returns the previous state (so a test can put it back)."""
    return _switch.set("on" if on else "off") == "on"


def batch_invariant() -> bool:
    return _switch.mode == "on"
