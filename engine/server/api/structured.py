"""Structured output from the API fields: ``response_format`` / ``text.format``, vLLM's
``structured_outputs`` and ``guided_*`` extras, and tool calls forced or strict in the model's own
tool-call format. Every spec is compiled-checked here, so a bad schema, regex or grammar is a 400
naming the field (with the compiler's message) before the request is admitted."""

from __future__ import annotations

import json
from typing import Any

from engine.server.conversation import Conversation, ToolSpec
from engine.server.errors import bad_request, unsupported
from engine.server.tool_parsers import deepseek
from engine.structured.spec import StructuredSpec, check


def checked(spec: StructuredSpec | None, param: str) -> StructuredSpec | None:
    if spec is None:
        return None
    try:
        check(spec)
    except ValueError as exc:
        raise bad_request(f"Invalid {param}: {exc}", param=param) from exc
    return spec


def _schema_spec(schema: Any, param: str) -> StructuredSpec:
    try:
        return StructuredSpec.json_schema(schema)
    except ValueError as exc:
        raise bad_request(f"Invalid {param}: {exc}", param=param) from exc


def response_format(fmt: dict[str, Any] | None, param: str, nested: bool = True) -> StructuredSpec | None:
    """Chat's ``response_format`` (the schema nested under ``json_schema``) or Responses'
    ``text.format`` (``nested=False``: name, schema and strict beside ``type``)."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise bad_request(f"{param} must be an object.", param=param)
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return StructuredSpec("json_object")
    if kind == "json_schema":
        body = fmt.get("json_schema") if nested else fmt
        where = f"{param}.json_schema.schema" if nested else f"{param}.schema"
        if not isinstance(body, dict) or not isinstance(body.get("schema"), dict):
            raise bad_request(f"{where} must be a JSON schema object.", param=where)
        return checked(_schema_spec(body["schema"], where), where)
    raise bad_request(
        f"{param}.type must be 'text', 'json_object' or 'json_schema', not {kind!r}.", param=param
    )


# vLLM's extras: the older top-level names, and the keys of ``structured_outputs``.
_GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_grammar": "grammar",
    "guided_choice": "choice",
}


def vllm_extras(req: Any) -> StructuredSpec | None:
    given = {key: getattr(req, name) for name, key in _GUIDED.items() if getattr(req, name, None) is not None}
    params = {key: f"guided_{key}" for key in given}
    outputs = getattr(req, "structured_outputs", None)
    if outputs:
        for key, value in outputs.items():
            if value is None or value is False:
                continue
            if key not in ("json", "regex", "grammar", "choice", "json_object"):
                raise unsupported(f"structured_outputs.{key}")
            given[key] = value
            params[key] = f"structured_outputs.{key}"
    if len(given) > 1:
        raise bad_request(
            f"Only one structured output constraint may be given, not {sorted(params.values())}."
        )
    if not given:
        return None
    ((key, value),) = given.items()
    param = params[key]
    if key == "json":
        return checked(_schema_spec(value, param), param)
    if key == "json_object":
        return StructuredSpec("json_object")
    if key == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise bad_request(f"{param} must be a non-empty list of strings.", param=param)
        return checked(StructuredSpec.choice(value), param)
    if not isinstance(value, str):
        raise bad_request(f"{param} must be a string.", param=param)
    return checked(StructuredSpec("regex" if key == "regex" else "grammar", value), param)


# Tool calls in each format (engine.server.tool_parsers.call_format): the text before a call's
# arguments and after them, and what wraps the calls (DeepSeek's block markers).
def _call_frame(fmt: str, name: str) -> tuple[str, str]:
    quoted = json.dumps(name)
    if fmt == "hermes":
        return f'<tool_call>\n{{"name": {quoted}, "arguments": ', "}\n</tool_call>"
    if fmt == "llama3":
        return f'{{"name": {quoted}, "parameters": ', "}"
    if fmt in ("deepseek", "deepseek_v3"):
        return deepseek.call_frame(name, fenced=fmt == "deepseek_v3")
    raise unsupported("tool_choice", f"forced or strict tool calls in the '{fmt}' tool-call format")


def _calls_frame(fmt: str) -> tuple[str, str]:
    if fmt in ("deepseek", "deepseek_v3"):
        return deepseek.CALLS_BEGIN, deepseek.CALLS_END
    return "", ""


def _literal(text: str):
    import xgrammar as xgr

    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")  # EBNF strings take JSON's escapes


def forced_tool_call(tools: list[ToolSpec], name: str | None, fmt: str) -> StructuredSpec:
    """Exactly one call, of the named tool or of any tool, its arguments valid for its schema
    (so ``parallel_tool_calls`` false holds too)."""
    import xgrammar as xgr

    chosen = [t for t in tools if name is None or t.name == name]
    grammars = []
    for tool in chosen:
        begin, end = _call_frame(fmt, tool.name)
        try:
            arguments = xgr.Grammar.from_json_schema(json.dumps(tool.parameters), strict_mode=True)
        except (RuntimeError, ValueError) as exc:
            raise bad_request(
                f"Invalid parameters schema of tool '{tool.name}': {exc}", param="tools"
            ) from exc
        grammars.append(xgr.Grammar.concat(_literal(begin), arguments, _literal(end)))
    grammar = grammars[0] if len(grammars) == 1 else xgr.Grammar.union(*grammars)
    opening, closing = _calls_frame(fmt)
    if opening:
        grammar = xgr.Grammar.concat(_literal(opening), grammar, _literal(closing))
    return checked(StructuredSpec("grammar", str(grammar)), "tools")


def strict_tools(tools: list[ToolSpec], fmt: str) -> StructuredSpec | None:
    """Free text, but every call of a ``strict`` tool has arguments valid for its schema."""
    strict = [t for t in tools if t.strict]
    if not strict:
        return None
    triggers = {"hermes": "<tool_call>", "deepseek": deepseek.CALL_BEGIN, "deepseek_v3": deepseek.CALL_BEGIN}
    if fmt not in triggers:
        raise unsupported("tools.strict", f"strict tools with the '{fmt}' tool-call format")
    tags = []
    for tool in strict:
        begin, end = _call_frame(fmt, tool.name)
        tags.append({"begin": begin, "schema": json.dumps(tool.parameters), "end": end})
    return checked(
        StructuredSpec("structural_tag", json.dumps({"tags": tags, "triggers": [triggers[fmt]]})), "tools"
    )


def for_tools(conversation: Conversation, fmt: str) -> StructuredSpec | None:
    """``fmt``: the checkpoint's tool-call format (``engine.server.tool_parsers.call_format``)."""
    if not conversation.tools or conversation.tool_choice in ("auto", "none"):
        return strict_tools(conversation.tools, fmt) if conversation.tools else None
    return forced_tool_call(conversation.tools, conversation.forced_tool, fmt)


def tool_choice(
    mode: str, name: str | None, tools: list[ToolSpec], param: str = "tool_choice"
) -> tuple[str, str | None]:
    """Checks a forced tool's name against the tools given."""
    if mode in ("required", "named") and not tools:
        raise bad_request(f"{param} forces a tool call, but no tools were given.", param=param)
    if mode == "named" and name not in {t.name for t in tools}:
        raise bad_request(
            f"{param} names the tool {name!r}, which is not among the tools given.", param=param
        )
    return mode, name
