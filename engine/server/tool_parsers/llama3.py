"""Llama 3.x JSON tool calls: the whole reply is ``{"name": ..., "parameters": {...}}``.

Several calls may be separated by ``;`` and the reply may start with ``<|python_tag|>``. A reply
whose first visible character is not ``{`` (or the python tag) is plain content and streams as is.
"""

from __future__ import annotations

import json

from engine.server.tool_parsers.base import ParsedDelta, ToolCall, ToolParser, arguments_json

PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


class Llama3JsonToolParser(ToolParser):
    name = "llama3"

    def __init__(self) -> None:
        self._raw = ""  # everything seen, to hand back as content if it turns out not to be calls
        self._buffer = ""  # tool-mode text not yet turned into calls
        self._mode: str | None = None  # None (undecided), "content" or "tools"
        self._emitted = 0

    def feed(self, text: str) -> ParsedDelta:
        if self._mode == "content":
            return ParsedDelta(content=text)
        self._raw += text
        if self._mode is None:
            head = self._raw.lstrip()
            if not head or (PYTHON_TAG.startswith(head) and head != PYTHON_TAG):
                return ParsedDelta()  # cannot tell yet
            if head.startswith(("{", PYTHON_TAG)):
                self._mode = "tools"
                self._buffer = head.removeprefix(PYTHON_TAG)
            else:
                self._mode = "content"
                return ParsedDelta(content=self._raw)
            return self._drain()
        self._buffer += text
        return self._drain() if "}" in text else ParsedDelta()

    def finish(self) -> ParsedDelta:
        if self._mode is None:
            return ParsedDelta(content=self._raw)
        if self._mode == "content":
            return ParsedDelta()
        out = self._drain()
        rest = self._buffer.strip().lstrip(";").strip()
        self._buffer = ""
        if rest:
            # Not a (complete) call: give back the text, or everything if no call went out yet.
            out.content += self._raw if self._emitted == 0 else rest
        return out

    def _drain(self) -> ParsedDelta:
        out = ParsedDelta()
        while True:
            text = self._buffer.lstrip().lstrip(";").lstrip()
            if not text:
                self._buffer = ""
                return out
            try:
                obj, end = _DECODER.raw_decode(text)
            except json.JSONDecodeError:
                self._buffer = text  # incomplete so far (or not JSON: finish() decides)
                return out
            call = self._to_call(obj)
            if call is None:
                if self._emitted == 0:
                    self._mode = "content"
                    out.content += self._raw
                    self._buffer = ""
                    return out
                self._buffer = text  # finish() returns it as content
                return out
            out.tool_calls.append(call)
            self._emitted += 1
            self._buffer = text[end:]

    @staticmethod
    def _to_call(obj: object) -> ToolCall | None:
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        args = arguments_json(obj.get("parameters", obj.get("arguments")))
        return None if args is None else ToolCall.new(obj["name"], args)
