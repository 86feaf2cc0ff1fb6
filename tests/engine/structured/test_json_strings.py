"""JSON-schema grammars keep raw control characters out of strings, bounded or not (xgrammar 0.2.9
lets them into strings with minLength/maxLength; engine/structured/spec.py mends that), and bound
the whitespace between tokens."""

from __future__ import annotations

import pytest
import xgrammar as xgr

from engine.structured.spec import MAX_JSON_WHITESPACE, StructuredSpec, to_grammar

VOCAB = ['"', "a", "\x07", "\x00", "\\n", "\\", "n", " ", "{", "}", ":", "x"]


def matcher(schema: dict) -> xgr.GrammarMatcher:
    info = xgr.TokenizerInfo(VOCAB, vocab_type=xgr.VocabType.RAW)
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_grammar(
        to_grammar(StructuredSpec.json_schema(schema))
    )
    return xgr.GrammarMatcher(compiled)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "string", "maxLength": 7},
        {"type": "string", "minLength": 1, "maxLength": 3},
    ],
)
def test_control_characters_never_enter_a_string(schema):
    for control in ("\x07", "\x00", "\x1f"):
        m = matcher(schema)
        assert m.accept_string('"a')
        assert not m.accept_string(control), (schema, control)
    m = matcher(schema)
    assert m.accept_string('"a"') and not m.accept_string("a")  # a plain string, closed


def test_whitespace_between_tokens_is_bounded():
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    m = matcher(schema)
    assert m.accept_string("{" + " " * MAX_JSON_WHITESPACE)
    assert not m.accept_string(" ")
