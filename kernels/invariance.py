"""Whether this process runs batch-invariant (``EngineConfig.batch_invariant``): one switch, here so
that the kernels (``cpu_invariant``) and the engine's layers read the same one. Set once when an
engine builds (``engine/switches.py``, through ``engine.layers.batch_invariant``)."""

from __future__ import annotations

from kernels.mode_switch import ModeSwitch

_switch = ModeSwitch("batch_invariant", ("off", "on"), default="off")


def set_batch_invariant(on: bool) -> bool:
    """Turn the mode on or off in this process; returns the previous state (so a test can put it back)."""
    return _switch.set("on" if on else "off") == "on"


def batch_invariant() -> bool:
    return _switch.mode == "on"
