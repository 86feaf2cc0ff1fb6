"""The environment variables that may choose an engine setting: read here and nowhere else.

Each one names an ``EngineConfig`` field. When set, it replaces that field's default; a value given
explicitly (a ``chassis serve`` flag, an ``LLM(...)`` keyword) still wins. ``EngineConfig`` reads
them once, when it is made; kernels and collectives then take the resolved value from the engine.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLES = {
    "kernels": "CHASSIS_KERNELS",
    "gemv": "CHASSIS_GEMV",
    "gemv_table": "CHASSIS_GEMV_TABLE",
    "tp_all_reduce": "CHASSIS_TP_ALL_REDUCE",
}


def variable_for(field: str) -> str | None:
    """The variable that may set ``field``'s default, if there is one."""
    return VARIABLES.get(field)


def environment_default(field: str) -> str | None:
    """The value the environment gives ``field``; None when its variable is unset or empty."""
    return os.environ.get(VARIABLES[field], "").strip() or None


# Not a setting: a test holds the engine between steps with it (engine/testing/step_gate.py).
TEST_STEP_GATE = "CHASSIS_TEST_STEP_GATE"


def test_step_gate_file() -> str | None:
    """The gate file a test set for this process; None outside such tests."""
    return os.environ.get(TEST_STEP_GATE, "").strip() or None


# Not an EngineConfig setting: checkpoints are also read where no engine is configured (the gateway's
# tokenizer, the control plane's inspection), and every such reader shares the one cache.
CACHE_DIR = "CHASSIS_CACHE_DIR"
CACHE_OFF = "off"


def cache_dir() -> Path | None:
    """Where what is derived from a checkpoint is kept between processes (engine/checkpoint/gguf_cache.py):
    ``$CHASSIS_CACHE_DIR``, else ``$XDG_CACHE_HOME/chassis``, else ``~/.cache/chassis``; None when
    ``CHASSIS_CACHE_DIR=off``."""
    value = os.environ.get(CACHE_DIR, "").strip()
    if value.lower() == CACHE_OFF:
        return None
    if value:
        return Path(value).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "chassis"
