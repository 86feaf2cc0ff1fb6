"""DeepSeek style tool calls, both the V3 and the V3.1 layouts.

V3:   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
"""

from __future__ import annotations

import re

from engine.server.tool_parsers.base import MarkedToolParser, ToolCall, arguments_json

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


def call_frame(name: str, fenced: bool) -> tuple[str, str]:
    """The text around one call's JSON arguments: V3's fenced layout, or V3.1's."""
    if fenced:
        return f"{CALL_BEGIN}function{SEP}{name}\n```json\n", f"\n```{CALL_END}"
    return f"{CALL_BEGIN}{name}{SEP}", CALL_END


def fenced_layout(chat_template: str | None) -> bool:
    """Whether the checkpoint's template writes V3's fenced calls (V3, R1) rather than V3.1's."""
    return "```json" in (chat_template or "")


_FENCED = re.compile(r"^\s*(?P<name>[^\n]+?)\s*\n\s*```(?:json)?\s*\n(?P<args>.*?)\n?\s*```\s*$", re.DOTALL)


def _parse_one(call: str) -> ToolCall | None:
    if SEP not in call:
        return None
    head, tail = call.split(SEP, 1)
    if head.strip() == "function":
        match = _FENCED.match(tail)
        if match is None:
            return None
        name, raw_args = match["name"], match["args"]
    else:
        name, raw_args = head.strip(), tail.strip()
    args = arguments_json(raw_args)
    if not name or args is None:
        return None
    return ToolCall.new(name, args)


class DeepSeekToolParser(MarkedToolParser):
    name = "deepseek"
    start_marker = CALLS_BEGIN
    end_marker = CALLS_END

    def parse_call(self, body: str) -> list[ToolCall] | None:
        calls: list[ToolCall] = []
        rest = body.strip()
        while rest:
            if not rest.startswith(CALL_BEGIN):
                return None
            end = rest.find(CALL_END)
            if end < 0:  # last call cut short without its end marker
                end = len(rest)
            call = _parse_one(rest[len(CALL_BEGIN) : end])
            if call is None:
                return None
            calls.append(call)
            rest = rest[end + len(CALL_END) :].strip()
        return calls or None
