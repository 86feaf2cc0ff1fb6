"""What a request's output must match: a JSON schema, free JSON, a regex, an EBNF grammar or a choice.

The API layer builds one from whichever field the client used (``response_format``, ``guided_json``,
a strict tool...) and checks it with ``check`` before the request is admitted, so a schema, regex or
grammar the compiler refuses is a 400 naming the field, never a failure inside the engine loop.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["json_schema", "json_object", "regex", "grammar", "choice", "structural_tag"]
_SOURCE_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)?\S+\.cc:\d+:\s*")
# Whitespace allowed between two JSON tokens: enough for pretty-printing a few levels deep, and a
# bound, so a model that prefers whitespace cannot spend its whole max_tokens on it (small models do).
MAX_JSON_WHITESPACE = 16
CHECK_CACHE_SIZE = 1024  # verdicts kept, as many as the compiled-grammar cache
KINDS: tuple[str, ...] = ("json_schema", "json_object", "regex", "grammar", "choice", "structural_tag")


@dataclass(frozen=True)
class StructuredSpec:
    kind: Kind
    # json_schema: the schema serialized (property order kept: it is the order generated);
    # regex and grammar: their source; choice: a JSON list of the allowed strings; json_object: "";
    # structural_tag: JSON {"tags": [{"begin", "schema", "end"}], "triggers": [...]}: free text
    # until a trigger, then a tag whose body matches its schema (strict tool calls among text).
    value: str = ""
    # The marker that ends the model's reasoning (e.g. ``</think>``): the grammar applies after it.
    reasoning_end: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"structured output kind must be one of {KINDS}, got {self.kind!r}")

    @staticmethod
    def json_schema(schema: object) -> StructuredSpec:
        if isinstance(schema, str):
            schema = json.loads(schema)
        if not isinstance(schema, dict):
            raise ValueError("a JSON schema must be an object")
        return StructuredSpec("json_schema", json.dumps(schema))

    @staticmethod
    def choice(options: list[str]) -> StructuredSpec:
        if not options or not all(isinstance(o, str) for o in options):
            raise ValueError("a choice must be a non-empty list of strings")
        return StructuredSpec("choice", json.dumps(options))

    def after_reasoning(self, marker: str | None) -> StructuredSpec:
        return StructuredSpec(self.kind, self.value, marker)


def to_grammar(spec: StructuredSpec):
    """The spec as an ``xgrammar.Grammar`` (tokenizer-independent); raises ValueError with the
    compiler's own message when the schema, regex or grammar is invalid."""
    import xgrammar as xgr

    try:
        if spec.kind == "json_schema":
            return json_schema_grammar(spec.value)
        if spec.kind == "json_object":
            return xgr.Grammar.builtin_json_grammar()
        if spec.kind == "regex":
            return xgr.Grammar.from_regex(spec.value)
        if spec.kind == "grammar":
            return xgr.Grammar.from_ebnf(spec.value)
        if spec.kind == "structural_tag":
            tag = json.loads(spec.value)
            items = [
                xgr.StructuralTagItem(begin=t["begin"], schema=t["schema"], end=t["end"]) for t in tag["tags"]
            ]
            return xgr.Grammar.from_structural_tag(items, tag["triggers"])
        return xgr.Grammar.from_regex(_choice_regex(json.loads(spec.value)))
    except (RuntimeError, ValueError, TypeError) as exc:
        message = _SOURCE_PREFIX.sub("", str(exc).strip())  # "[02:04:15] /project/cpp/x.cc:94: ..."
        raise ValueError(message or type(exc).__name__) from exc


# xgrammar 0.2.9 writes a string with minLength/maxLength as '"' chars{m,n} '"' whose character
# class lets raw control characters (U+0000-U+001F) through, which JSON forbids inside strings: a
# sampled BEL or NUL token made json.loads fail on output the grammar accepted. Its unbounded strings
# exclude them; bounded ones get the same class here, through the grammar's EBNF text.
_BOUNDED_STRING_CHARS = r"[^\"\\\r\n]"
_JSON_STRING_CHARS = r"[^\0-\x1f\"\\\r\n]"


def json_schema_grammar(schema: str, any_whitespace: bool = True):
    """The ``xgrammar.Grammar`` of a serialized JSON schema, strict (no extra properties), whitespace
    between tokens bounded (or none, ``any_whitespace=False``), control characters kept out of strings."""
    import xgrammar as xgr

    grammar = xgr.Grammar.from_json_schema(
        schema, strict_mode=True, any_whitespace=any_whitespace, max_whitespace_cnt=MAX_JSON_WHITESPACE
    )
    return _without_control_characters(grammar)


def _without_control_characters(grammar):
    import xgrammar as xgr

    ebnf = str(grammar)
    if _BOUNDED_STRING_CHARS not in ebnf:
        return grammar
    return xgr.Grammar.from_ebnf(ebnf.replace(_BOUNDED_STRING_CHARS, _JSON_STRING_CHARS))


def check(spec: StructuredSpec) -> None:
    """Raise ValueError (the compiler's message) when the spec cannot be compiled. The verdict is
    cached: a schema clients send again (the common case) costs a dict lookup, not a parse."""
    error = _check_error(StructuredSpec(spec.kind, spec.value))
    if error is not None:
        raise ValueError(error)


@functools.lru_cache(maxsize=CHECK_CACHE_SIZE)
def _check_error(spec: StructuredSpec) -> str | None:
    try:
        to_grammar(spec)
    except ValueError as exc:
        return str(exc)
    return None


def _choice_regex(options: list[str]) -> str:
    return "(" + "|".join(re.escape(o) for o in options) + ")"
