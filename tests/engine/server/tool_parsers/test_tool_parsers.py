"""Tool-call parsers on recorded replies of each model family, whole and in 1-character chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.server.tool_parsers import PARSERS, ParsedDelta, detect_parser

CASES = json.loads((Path(__file__).parent / "recorded_outputs.json").read_text(encoding="utf-8"))


def _expected(case: dict) -> tuple[str, list[tuple[str, dict]]]:
    return case["content"], [(name, args) for name, args in case["calls"]]


def _summary(delta: ParsedDelta) -> tuple[str, list[tuple[str, dict]]]:
    return delta.content, [(c.name, json.loads(c.arguments)) for c in delta.tool_calls]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['family']}-{i}" for i, c in enumerate(CASES)])
def test_whole_text(case):
    parser = PARSERS[case["family"]]()
    assert _summary(parser.parse(case["text"])) == _expected(case)


@pytest.mark.parametrize("case", CASES, ids=[f"{c['family']}-{i}" for i, c in enumerate(CASES)])
def test_one_character_chunks_give_the_same_result_and_never_retract(case):
    parser = PARSERS[case["family"]]()
    total = ParsedDelta()
    sent_so_far = []
    for char in case["text"]:
        delta = parser.feed(char)
        total.extend(delta)
        sent_so_far.append(total.content)
    total.extend(parser.finish())
    assert _summary(total) == _expected(case)
    # What was streamed is always a prefix of the final content: nothing is ever taken back.
    assert all(total.content.startswith(prefix) for prefix in sent_so_far)


def test_hermes_content_streams_before_the_call_completes():
    parser = PARSERS["hermes"]()
    assert parser.feed("Hello ").content == "Hello "
    assert parser.feed("<tool").content == ""  # might be a marker: held back
    delta = parser.feed('_call>{"name": "f", "arguments": {}}')
    assert delta.content == "" and delta.tool_calls == []
    delta = parser.feed("</tool_call>")
    assert [c.name for c in delta.tool_calls] == ["f"]
    assert delta.tool_calls[0].arguments == "{}"
    assert delta.tool_calls[0].id.startswith("call_")


def test_tool_call_ids_are_unique():
    delta = PARSERS["llama3"]().parse('{"name": "a", "parameters": {}}; {"name": "a", "parameters": {}}')
    assert len({c.id for c in delta.tool_calls}) == 2


def test_arguments_given_as_a_json_string_are_normalized():
    delta = PARSERS["hermes"]().parse('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert json.loads(delta.tool_calls[0].arguments) == {"x": 1}


@pytest.mark.parametrize(
    ("vocab", "model_type", "expected"),
    [
        ({"<tool_call>": 1}, "qwen3", "hermes"),
        ({"<｜tool▁calls▁begin｜>": 5}, "", "deepseek"),
        ({"<|python_tag|>": 9}, "llama", "llama3"),
        ({}, "llama", "llama3"),
        ({}, "mystery", "hermes"),
    ],
)
def test_detect_parser(vocab, model_type, expected):
    assert detect_parser(vocab, model_type) == expected
