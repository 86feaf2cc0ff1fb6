"""Reasoning output: the model's ``<think>`` … ``</think>`` text apart from its answer."""

from engine.server.reasoning.parser import ReasoningDelta, ReasoningParser
from engine.server.reasoning.styles import ReasoningStyle, detect_style

__all__ = ["ReasoningDelta", "ReasoningParser", "ReasoningStyle", "detect_style"]
