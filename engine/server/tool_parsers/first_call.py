"""``parallel_tool_calls: false``: a parser that passes on the first tool call and drops the rest."""

from __future__ import annotations

from collections.abc import Callable

from engine.server.tool_parsers.base import ParsedDelta, ToolParser


class FirstCallOnly(ToolParser):
    def __init__(self, inner: ToolParser) -> None:
        self.inner = inner
        self.name = inner.name
        self._called = False

    def feed(self, text: str) -> ParsedDelta:
        return self._keep_first(self.inner.feed(text))

    def finish(self) -> ParsedDelta:
        return self._keep_first(self.inner.finish())

    def _keep_first(self, delta: ParsedDelta) -> ParsedDelta:
        if self._called:
            delta.tool_calls = []
        elif delta.tool_calls:
            delta.tool_calls = delta.tool_calls[:1]
            self._called = True
        return delta


def first_call_only(parser_cls: type[ToolParser]) -> Callable[[], ToolParser]:
    return lambda: FirstCallOnly(parser_cls())
