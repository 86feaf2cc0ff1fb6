"""Hypothesis strategies for request bodies of the inference APIs (Chat Completions, Completions,
Anthropic Messages and count_tokens, Responses), well-formed and not.

Well-formed bodies follow the request models of engine/server/protocol/; each field may instead
take an edge value (a bound, past a bound, a wrong type, null) or a random JSON value. Generation
stays cheap: a body asks for at most a few tokens unless it tests the bound itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import strategies as st

# Strings a chat template gives meaning to; typed by a client they must stay plain text.
CONTROL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</s>"]
_INT64 = 2**63

short_text = st.text(max_size=12)
_plain = st.text(max_size=40)
text = st.one_of(
    _plain,
    _plain,
    # Control tokens, and halves of surrogate pairs: JSON escapes them ("\\ud800"), UTF-8 cannot.
    st.lists(
        st.one_of(st.sampled_from(CONTROL_TOKENS), st.text(max_size=8), st.characters(categories=["Cs"])),
        max_size=5,
    ).map("".join),
    _plain,
)
too_long = st.just("x" * 3000)  # past the context once tokenized
edge_ints = st.sampled_from([0, -1, 2**31, _INT64 - 1, _INT64, 2**64, -_INT64 - 1, 10**30, -(10**30)])
# NaN and infinities are not JSON: here as strings and numbers far past float64 (raw_bodies sends the
# literals NaN, Infinity and 1e400 as well).
edge_floats = st.one_of(
    st.sampled_from([-0.0, 1e308, -1e308, 5e-324, "NaN", "Infinity", "-inf", 10**400]),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), edge_ints, edge_floats, text)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(short_text, inner, max_size=4)),
    max_leaves=12,
)


# Words the APIs define but this server refuses, or does not know.
_WRONG_WORDS = "image image_url thinking robot web_search input_image required json_object".split()
# What a broken field holds instead: an edge number, a wrong type, null or any JSON value.
edge_values = st.one_of(
    edge_ints,
    edge_floats,
    st.none(),
    st.booleans(),
    text,
    too_long,
    json_values,
    st.sampled_from(_WRONG_WORDS),
)
# A broken max_tokens: never null, which would ask for the whole context (too slow to fuzz).
edge_max_tokens = st.sampled_from([0, -1, 513, 100_000, _INT64, 2**64, "4", 1.5, True, [4]])


_wide = st.integers(0, 2**32)


def fields(required: dict, optional: dict, broken_percent: int = 8) -> st.SearchStrategy[dict]:
    """A JSON object with the required fields and any subset of the optional ones, each valid; in
    ``broken_percent`` of them one field is broken (an edge value or, if required, missing), and in a
    few more an unknown field is added (ignored or refused, as the API chooses)."""
    names = sorted({*required, *optional})

    @st.composite
    def build(draw) -> dict:
        body = draw(st.fixed_dictionaries(required, optional=optional))
        # Hypothesis favours small integers (zero above all); drawn from a wide range, the roll and
        # the field choice come out near uniform, and a roll of zero keeps the body valid.
        roll = 99 - draw(_wide) % 100
        if roll < broken_percent and names:
            name = names[draw(_wide) % len(names)]
            if name.startswith("max_"):
                body[name] = draw(edge_max_tokens)
            elif name in required and draw(st.booleans()):
                del body[name]
            else:
                body[name] = draw(edge_values)
        elif roll < broken_percent * 4 // 3:
            body[f"x_{draw(short_text)}"] = draw(json_values)
        return body

    return build()


# JSON Schemas as tools declare their parameters, property names included (control tokens too).
json_schemas = st.recursive(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])},
        optional={"description": text, "enum": st.lists(json_scalars, max_size=3)},
    ),
    lambda inner: st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(text, inner, max_size=3)},
            optional={"required": st.lists(text, max_size=2), "additionalProperties": st.booleans()},
        ),
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=2)}),
    ),
    max_leaves=8,
)

max_tokens = st.integers(1, 4)
TOP_BROKEN_PERCENT = 20  # a request's own fields; nested objects break less often


def _sampling(model: str) -> tuple[dict, dict]:
    """Required and optional sampling fields shared by Chat Completions and Completions."""
    required = {"model": st.just(model), "max_tokens": max_tokens}
    optional = {
        "stream": st.booleans(),
        "n": st.one_of(st.integers(1, 3), st.just(128)),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0.01, 1),
        "top_k": st.integers(-1, 100),
        "min_p": st.floats(0, 1),
        "seed": st.integers(-(2**63), 2**63 - 1),
        "stop": st.one_of(text, st.lists(text, max_size=3)),
        "stop_token_ids": st.lists(st.integers(0, 200), max_size=3),
        "frequency_penalty": st.floats(-2, 2),
        "presence_penalty": st.floats(-2, 2),
        "repetition_penalty": st.floats(0.1, 2),
        "min_tokens": st.integers(0, 4),
        "ignore_eos": st.booleans(),
        "skip_special_tokens": st.booleans(),
        "include_stop_str_in_output": st.booleans(),
        "logit_bias": st.just({}),
        "user": text,
        "cache_salt": text,
        "response_format": st.just({"type": "text"}),
    }
    return required, optional


def _with_usage(bodies: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    """Some streamed requests also ask for usage (stream_options is refused without stream)."""
    return st.tuples(bodies, st.booleans()).map(
        lambda t: (
            {**t[0], "stream_options": {"include_usage": True}}
            if t[1] and t[0].get("stream") is True
            else t[0]
        )
    )


# --- Chat Completions ---------------------------------------------------------------------------

chat_content = st.one_of(
    text,
    text,
    st.lists(fields({"type": st.sampled_from(["text", "input_text"]), "text": text}, {}), max_size=3),
)
tool_call_in = st.fixed_dictionaries(
    {
        "id": short_text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": text, "arguments": text}),
    }
)
chat_message = st.one_of(
    fields(
        {"role": st.sampled_from(["system", "developer", "user", "user"]), "content": chat_content},
        {"name": text},
    ),
    fields(
        {"role": st.just("assistant")},
        {"content": st.one_of(chat_content, st.none()), "tool_calls": st.lists(tool_call_in, max_size=2)},
    ),
    fields({"role": st.just("tool"), "content": chat_content, "tool_call_id": short_text}, {}),
)
function_tool = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": fields(
            {"name": text}, {"description": text, "parameters": json_schemas, "strict": st.booleans()}
        ),
    }
)


def chat_bodies(model: str) -> st.SearchStrategy[dict]:
    required, optional = _sampling(model)
    required = {**required, "messages": st.lists(chat_message, min_size=1, max_size=4)}
    optional = {
        **optional,
        "max_completion_tokens": max_tokens,
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 20),
        "tools": st.lists(function_tool, max_size=2),
        "tool_choice": st.sampled_from(["auto", "none"]),
        "parallel_tool_calls": st.booleans(),
        "metadata": st.dictionaries(short_text, text, max_size=2),
        "chat_template_kwargs": json_values,
        "modalities": st.just(["text"]),
    }
    return _with_usage(fields(required, optional, TOP_BROKEN_PERCENT))


# --- Completions --------------------------------------------------------------------------------

token_ids = st.lists(st.one_of(st.integers(0, 500), st.integers(0, 500), edge_ints), min_size=1, max_size=6)


def completion_bodies(model: str) -> st.SearchStrategy[dict]:
    required, optional = _sampling(model)
    prompt = st.one_of(
        text.filter(bool),
        st.lists(text.filter(bool), min_size=1, max_size=1),
        token_ids,
        st.lists(token_ids, min_size=1, max_size=1),
    )
    required = {**required, "prompt": prompt}
    optional = {
        **optional,
        "logprobs": st.integers(0, 20),
        "echo": st.just(False),
        "best_of": st.none(),
        "suffix": st.none(),
    }
    return _with_usage(fields(required, optional, TOP_BROKEN_PERCENT))


# --- Anthropic Messages and count_tokens --------------------------------------------------------


def _anthropic_block(kind: str, extra: dict) -> st.SearchStrategy[dict]:
    return fields({"type": st.just(kind), **extra}, {"cache_control": json_values})


_text_block = _anthropic_block("text", {"text": text})
_tool_result_content = st.lists(fields({"type": st.just("text"), "text": text}, {}), max_size=2)
anthropic_message = st.one_of(
    fields(
        {
            "role": st.just("user"),
            "content": st.one_of(
                text,
                st.lists(
                    st.one_of(
                        _text_block,
                        _anthropic_block(
                            "tool_result",
                            {"tool_use_id": short_text, "content": st.one_of(text, _tool_result_content)},
                        ),
                    ),
                    max_size=3,
                ),
            ),
        },
        {},
    ),
    fields(
        {
            "role": st.just("assistant"),
            "content": st.one_of(
                text,
                st.lists(
                    st.one_of(
                        _text_block,
                        _anthropic_block(
                            "tool_use",
                            {
                                "id": short_text,
                                "name": text,
                                "input": st.dictionaries(text, json_values, max_size=3),
                            },
                        ),
                    ),
                    max_size=3,
                ),
            ),
        },
        {},
    ),
)
anthropic_tool = fields(
    {"name": text, "input_schema": json_schemas},
    {"description": text, "type": short_text},
)


def _anthropic_prompt(model: str) -> tuple[dict, dict]:
    required = {
        "model": st.just(model),
        "messages": st.lists(anthropic_message, min_size=1, max_size=3),
    }
    optional = {
        "system": st.one_of(text, st.lists(_text_block, max_size=2)),
        "tools": st.lists(anthropic_tool, max_size=2),
        "tool_choice": st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "tool", "none"])}),
        "thinking": st.fixed_dictionaries({"type": st.sampled_from(["disabled", "enabled"])}),
    }
    return required, optional


def messages_bodies(model: str) -> st.SearchStrategy[dict]:
    required, optional = _anthropic_prompt(model)
    required = {**required, "max_tokens": max_tokens}
    optional = {
        **optional,
        "stream": st.booleans(),
        "stop_sequences": st.lists(text, max_size=3),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0.01, 1),
        "top_k": st.integers(0, 100),
        "metadata": st.dictionaries(short_text, json_values, max_size=2),
    }
    return fields(required, optional, TOP_BROKEN_PERCENT)


def count_tokens_bodies(model: str) -> st.SearchStrategy[dict]:
    return fields(*_anthropic_prompt(model), TOP_BROKEN_PERCENT)


# --- Responses ----------------------------------------------------------------------------------

response_content = st.one_of(
    text,
    st.lists(
        fields({"type": st.sampled_from(["input_text", "output_text", "text"])}, {"text": text}),
        max_size=3,
    ),
)
response_item = st.one_of(
    fields(
        {
            "role": st.sampled_from(["user", "user", "assistant", "system", "developer"]),
            "content": response_content,
        },
        {"type": st.just("message")},
    ),
    fields({"type": st.just("function_call"), "call_id": short_text, "name": text}, {"arguments": text}),
    fields({"type": st.just("function_call_output"), "call_id": short_text, "output": response_content}, {}),
)
response_tool = fields(
    {"type": st.just("function")},
    {"name": text, "description": text, "parameters": json_schemas, "strict": st.booleans()},
)


def responses_bodies(model: str) -> st.SearchStrategy[dict]:
    required = {
        "model": st.just(model),
        "input": st.one_of(text, st.lists(response_item, max_size=3)),
        "max_output_tokens": max_tokens,
    }
    optional = {
        "instructions": text,
        "previous_response_id": st.sampled_from([None, "resp_unknown"]),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0.01, 1),
        "stream": st.booleans(),
        "store": st.booleans(),
        "tools": st.lists(response_tool, max_size=2),
        "tool_choice": st.sampled_from(["auto", "none"]),
        "text": fields({}, {"format": fields({"type": st.just("text")}, {})}),
        "reasoning": st.just({"effort": None}),
        "truncation": st.just("disabled"),
        "metadata": st.dictionaries(short_text, text, max_size=2),
    }
    return _with_usage(fields(required, optional, TOP_BROKEN_PERCENT))


# --- Bodies that are not a request at all -------------------------------------------------------


@dataclass(frozen=True)
class RawBody:
    """Bytes sent as they are, under a content type."""

    content: bytes
    content_type: str = "application/json"


def _nested(depth: int) -> bytes:
    return b'{"model": "m", "messages": ' + b"[" * depth + b"]" * depth + b"}"


def raw_bodies(valid: st.SearchStrategy[dict]) -> st.SearchStrategy[RawBody]:
    """Random JSON values, valid bodies cut short or under another content type, deep nesting, bad
    UTF-8 and JSON's non-standard literals (NaN, Infinity)."""
    encoded = valid.map(lambda body: json.dumps(body).encode())
    return st.one_of(
        json_values.map(lambda value: RawBody(json.dumps(value).encode())),
        st.tuples(encoded, st.floats(0, 1)).map(lambda t: RawBody(t[0][: int(len(t[0]) * t[1])])),
        st.tuples(encoded, st.sampled_from(["text/plain", "application/x-www-form-urlencoded", ""])).map(
            lambda t: RawBody(*t)
        ),
        st.sampled_from([10, 1000, 100_000]).map(lambda depth: RawBody(_nested(depth))),
        st.binary(max_size=20).map(lambda junk: RawBody(b'{"model": "' + junk + b'"}')),
        st.sampled_from(
            [
                b'{"model": NaN}',
                b'{"max_tokens": Infinity, "n": -Infinity}',
                b'{"model": "m", "temperature": 1e400}',
                b"",
                b"null",
            ]
        ).map(RawBody),
    )


# Header values as HTTP allows them: visible ASCII, spaces inside, and any byte above 0x7f.
_header_byte = st.one_of(st.integers(0x21, 0x7E), st.integers(0x80, 0xFF), st.just(0x20))
header_value = st.lists(_header_byte, max_size=12).map(lambda codes: bytes(codes).strip() or b"x")
extra_headers = st.dictionaries(
    st.sampled_from(["x-session-id", "x-request-id", "user-agent", "x-api-key", "openai-organization"]),
    header_value,
    max_size=3,
)
