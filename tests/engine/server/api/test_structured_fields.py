"""API fields to structured-output specs: each constraint named by its field, strict tools as a
structural tag, and parallel_tool_calls false keeping only the first call."""

import json

import pytest

from engine.server.api import structured
from engine.server.conversation import Conversation, ToolSpec
from engine.server.errors import APIError
from engine.server.protocol.openai import CompletionRequest
from engine.server.tool_parsers import PARSERS
from engine.server.tool_parsers.first_call import first_call_only
from engine.structured.spec import check

ARGS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def completion(**fields) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "x", **fields})


def test_vllm_extras_old_and_new_names():
    assert structured.vllm_extras(completion(guided_regex="a+")).kind == "regex"
    assert (
        structured.vllm_extras(completion(structured_outputs={"grammar": 'root ::= "a"'})).kind == "grammar"
    )
    assert json.loads(structured.vllm_extras(completion(guided_choice=["x", "y"])).value) == ["x", "y"]
    assert structured.vllm_extras(completion(structured_outputs={"json_object": True})).kind == "json_object"
    for fields, param in (
        ({"guided_regex": "(a"}, "guided_regex"),
        ({"structured_outputs": {"json": {"type": "frob"}}}, "structured_outputs.json"),
        ({"structured_outputs": {"whitespace_pattern": "x"}}, "structured_outputs.whitespace_pattern"),
        ({"guided_choice": []}, "guided_choice"),
    ):
        with pytest.raises(APIError) as info:
            structured.vllm_extras(completion(**fields))
        assert info.value.status == 400 and info.value.param == param
    with pytest.raises(APIError):
        structured.vllm_extras(completion(guided_regex="a", guided_grammar='root ::= "a"'))


def test_tool_constraints_follow_tool_choice_and_strict():
    tools = [ToolSpec("get_weather", "", ARGS, strict=True), ToolSpec("noop", "", {"type": "object"})]
    auto = structured.for_tools(Conversation(tools=tools), "hermes")
    assert auto.kind == "structural_tag" and json.loads(auto.value)["triggers"] == ["<tool_call>"]
    check(auto)
    named = structured.for_tools(Conversation(tools=tools, tool_choice="named", forced_tool="noop"), "hermes")
    assert named.kind == "grammar" and "noop" in named.value and "get_weather" not in named.value
    required = structured.for_tools(Conversation(tools=tools, tool_choice="required"), "llama3")
    assert "get_weather" in required.value and "noop" in required.value
    assert structured.for_tools(Conversation(tools=tools[1:]), "hermes") is None  # no strict tool
    with pytest.raises(APIError) as info:
        structured.for_tools(Conversation(tools=tools, tool_choice="required"), "nope")
    assert info.value.param == "tool_choice"


V31_CALL = "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{RAW}<｜tool▁call▁end｜>"
V3_CALL = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{RAW}\n```<｜tool▁call▁end｜>"


@pytest.mark.parametrize(("fmt", "call", "template"), [
    ("deepseek", V31_CALL, "{{ call.function.name }}<｜tool▁sep｜>"),
    ("deepseek_v3", V3_CALL, "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json'"),
])  # fmt: skip
def test_forced_deepseek_calls_are_one_block_the_parser_reads(fmt, call, template):
    from xgrammar.testing import _is_grammar_accept_string

    from engine.server.tool_parsers import call_format

    assert call_format("deepseek", template) == fmt
    tools = [ToolSpec("get_weather", "", {**ARGS, "additionalProperties": False}), ToolSpec("noop", "", {})]
    required = structured.for_tools(Conversation(tools=tools, tool_choice="required"), fmt)
    named = structured.for_tools(Conversation(tools=tools, tool_choice="named", forced_tool="noop"), fmt)
    one = "<｜tool▁calls▁begin｜>" + call.replace("{RAW}", '{"city": "Oslo"}') + "<｜tool▁calls▁end｜>"
    assert _is_grammar_accept_string(required.value, one)
    assert not _is_grammar_accept_string(named.value, one)  # the named tool only
    assert not _is_grammar_accept_string(required.value, one.replace("city", "town"))
    two = one.replace(
        "<｜tool▁calls▁end｜>", call.replace("{RAW}", '{"city": "Rome"}') + "<｜tool▁calls▁end｜>"
    )
    assert not _is_grammar_accept_string(required.value, two)  # exactly one call
    assert not _is_grammar_accept_string(required.value, "Sure. " + one)
    [parsed] = PARSERS["deepseek"]().parse(one).tool_calls
    assert parsed.name == "get_weather" and json.loads(parsed.arguments) == {"city": "Oslo"}
    strict = structured.for_tools(Conversation(tools=[ToolSpec("get_weather", "", ARGS, strict=True)]), fmt)
    assert strict.kind == "structural_tag" and json.loads(strict.value)["triggers"] == [
        "<｜tool▁call▁begin｜>"
    ]


def test_parallel_tool_calls_false_keeps_the_first_call():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>'
    assert [c.name for c in PARSERS["hermes"]().parse(text).tool_calls] == ["a", "b"]
    assert [c.name for c in first_call_only(PARSERS["hermes"])().parse(text).tool_calls] == ["a"]
