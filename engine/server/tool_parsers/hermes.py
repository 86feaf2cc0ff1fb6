"""Hermes / Qwen style: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

from __future__ import annotations

import json

from engine.server.tool_parsers.base import MarkedToolParser, ToolCall, arguments_json


class HermesToolParser(MarkedToolParser):
    name = "hermes"
    start_marker = "<tool_call>"
    end_marker = "</tool_call>"

    def parse_call(self, body: str) -> list[ToolCall] | None:
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        args = arguments_json(obj.get("arguments", obj.get("parameters")))
        if args is None:
            return None
        return [ToolCall.new(obj["name"], args)]
