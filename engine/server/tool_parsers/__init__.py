"""Tool-call parsers by model family, and the choice of one for a checkpoint."""

from __future__ import annotations

from engine.server.tool_parsers.base import ParsedDelta, ToolCall, ToolParser
from engine.server.tool_parsers.deepseek import CALLS_BEGIN, DeepSeekToolParser, fenced_layout
from engine.server.tool_parsers.hermes import HermesToolParser
from engine.server.tool_parsers.llama3 import PYTHON_TAG, Llama3JsonToolParser

PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesToolParser,
    "llama3": Llama3JsonToolParser,
    "deepseek": DeepSeekToolParser,
}
CHOICES = [*PARSERS, "auto"]


def detect_parser(vocab: dict[str, int] | None, model_type: str = "") -> str:
    """Pick the family from the tokenizer's vocabulary (markers are added tokens) or model type."""
    vocab = vocab or {}
    if CALLS_BEGIN in vocab or model_type.startswith("deepseek"):
        return "deepseek"
    if "<tool_call>" in vocab:
        return "hermes"
    if PYTHON_TAG in vocab or model_type.startswith("llama"):
        return "llama3"
    return "hermes"


def call_format(parser: str, chat_template: str | None) -> str:
    """The layout forced and strict tool calls are written in: the parser's name, or
    ``deepseek_v3`` for DeepSeek templates that fence the arguments (``deepseek`` is V3.1's)."""
    if parser == "deepseek" and fenced_layout(chat_template):
        return "deepseek_v3"
    return parser


__all__ = [
    "CHOICES",
    "PARSERS",
    "ParsedDelta",
    "ToolCall",
    "ToolParser",
    "call_format",
    "detect_parser",
]
