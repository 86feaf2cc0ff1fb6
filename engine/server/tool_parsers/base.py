"""Incremental tool-call parsing: model text in, plain content and finished tool calls out.

A parser is fed the detokenized text as it streams and returns what can safely be sent on. Text
that might be the start of a tool-call marker is held back until the next chunk decides it, and a
tool call is emitted only once it is complete and its JSON parses, so nothing sent early ever has
to be taken back. Feeding the whole text at once gives the same result as feeding it one
character at a time: the non-streaming path uses the same code.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object, serialized

    @staticmethod
    def new(name: str, arguments: object) -> ToolCall:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=name, arguments=args)


@dataclass
class ParsedDelta:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def extend(self, other: ParsedDelta) -> None:
        self.content += other.content
        self.tool_calls.extend(other.tool_calls)


def partial_marker_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def arguments_json(value: object) -> str | None:
    """Normalize a tool call's arguments to a serialized JSON object, or None if they are not one."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        return None
    return json.dumps(value, ensure_ascii=False)


class ToolParser(ABC):
    """One parser instance per generated sequence (it keeps state between chunks)."""

    name: str

    @abstractmethod
    def feed(self, text: str) -> ParsedDelta:
        """Consume the next chunk of generated text."""

    @abstractmethod
    def finish(self) -> ParsedDelta:
        """The generation ended: flush whatever is still held back."""

    def parse(self, text: str) -> ParsedDelta:
        result = self.feed(text)
        result.extend(self.finish())
        return result


class MarkedToolParser(ToolParser):
    """Tool calls between a start and an end marker, plain content outside them (Hermes, DeepSeek)."""

    start_marker: str
    end_marker: str

    def __init__(self) -> None:
        self._buffer = ""
        self._in_call = False

    @abstractmethod
    def parse_call(self, body: str) -> list[ToolCall] | None:
        """Tool calls in the text between the markers, or None when it is not valid."""

    def feed(self, text: str) -> ParsedDelta:
        self._buffer += text
        out = ParsedDelta()
        while True:
            if not self._in_call:
                pos = self._buffer.find(self.start_marker)
                if pos < 0:
                    keep = partial_marker_suffix(self._buffer, self.start_marker)
                    out.content += self._buffer[: len(self._buffer) - keep]
                    self._buffer = self._buffer[len(self._buffer) - keep :]
                    return out
                out.content += self._buffer[:pos]
                self._buffer = self._buffer[pos + len(self.start_marker) :]
                self._in_call = True
            pos = self._buffer.find(self.end_marker)
            if pos < 0:
                return out
            body = self._buffer[:pos]
            self._buffer = self._buffer[pos + len(self.end_marker) :]
            self._in_call = False
            out.extend(self._emit(body, closed=True))

    def finish(self) -> ParsedDelta:
        out = self.feed("")
        rest, self._buffer = self._buffer, ""
        if self._in_call:
            # Generation stopped (EOS, stop string, length) before the end marker.
            self._in_call = False
            out.extend(self._emit(rest, closed=False))
        else:
            out.content += rest
        return out

    def _emit(self, body: str, closed: bool) -> ParsedDelta:
        calls = self.parse_call(body)
        if calls is None:
            # Not a valid call: hand the text back as content, exactly as the model wrote it.
            raw = self.start_marker + body + (self.end_marker if closed else "")
            return ParsedDelta(content=raw)
        return ParsedDelta(tool_calls=calls)
