"""Chassis inference engine.

``from engine import LLM, SamplingParams`` is the public Python API. Imports are lazy so that
``import engine`` (and ``chassis --help``) never pays for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["LLM", "SamplingParams", "AsyncLLMEngine", "EngineClient"]

_LAZY = {
    "LLM": ("engine.clients.llm", "LLM"),
    "SamplingParams": ("engine.sampling.params", "SamplingParams"),
    # The in-thread client (``InThreadEngineClient``), under the name it was published with.
    "AsyncLLMEngine": ("engine.clients.in_thread", "InThreadEngineClient"),
    "EngineClient": ("engine.clients.protocol", "EngineClient"),
}

if TYPE_CHECKING:  # pragma: no cover
    from engine.clients.in_thread import InThreadEngineClient as AsyncLLMEngine
    from engine.clients.llm import LLM
    from engine.clients.protocol import EngineClient
    from engine.sampling.params import SamplingParams


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value
