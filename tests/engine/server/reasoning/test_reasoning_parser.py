"""The reasoning parser splits reasoning from the answer the same way whole or char by char."""

import pytest

from engine.server.reasoning import ReasoningParser, detect_style
from engine.server.reasoning.parser import ReasoningDelta

CASES = [
    # (starts in reasoning, generated text, reasoning, answer)
    (False, "<think>\nweigh it</think>\n\nThe answer.", "\nweigh it", "The answer."),
    (False, "  <think>a<b</think>c", "a<b", "c"),
    (False, "No thinking here <think>", "", "No thinking here <think>"),
    (False, "<thi", "", "<thi"),  # cut before the marker is complete: it was text after all
    (True, "step one</think>done", "step one", "done"),
    (True, "<think>reopened</think>x", "reopened", "x"),
    (True, "cut off by length </thi", "cut off by length </thi", ""),
]


def run(parser: ReasoningParser, chunks: list[str]) -> ReasoningDelta:
    total = ReasoningDelta()
    for chunk in chunks:
        delta = parser.feed(chunk)
        total.reasoning += delta.reasoning
        total.content += delta.content
    rest = parser.finish()
    return ReasoningDelta(total.reasoning + rest.reasoning, total.content + rest.content)


@pytest.mark.parametrize(("opens", "text", "reasoning", "answer"), CASES)
def test_whole_and_char_by_char_agree(opens, text, reasoning, answer):
    for chunks in ([text], list(text)):
        out = run(ReasoningParser(opens), chunks)
        assert (out.reasoning, out.content) == (reasoning, answer)


def test_style_and_switch_come_from_the_template():
    assert detect_style("{{ messages }}") is None
    qwen3 = detect_style("{% if enable_thinking is false %}<think>\n\n</think>{% endif %}")
    assert (qwen3.name, qwen3.switch, qwen3.thinking_on({})) == ("qwen3", "enable_thinking", True)
    assert not qwen3.thinking_on({"enable_thinking": False})
    v31 = detect_style("{% if thinking %}<think>{% else %}</think>{% endif %}")
    assert (v31.name, v31.switch, v31.thinking_on({})) == ("deepseek_v3", "thinking", False)
    r1 = detect_style("<|Assistant|><think>\n")
    assert (r1.name, r1.switch, r1.thinking_on({})) == ("deepseek_r1", None, True)
