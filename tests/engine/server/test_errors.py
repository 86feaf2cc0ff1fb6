"""Error bodies name the parameter, in OpenAI's and Anthropic's shapes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.server.errors import APIError, anthropic_body, from_validation_error, openai_body
from engine.server.protocol.openai import ChatCompletionRequest


def _error(data: dict) -> APIError:
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate(data)
    return from_validation_error(info.value)


def test_wrong_type_names_the_parameter():
    err = _error({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "many"})
    assert err.status == 400 and err.param == "max_tokens"


def test_negative_max_tokens_is_refused():
    err = _error({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1})
    assert err.param == "max_tokens" and "greater than or equal to 1" in err.message


def test_unknown_nested_parameter_is_refused_not_ignored():
    # Unknown top-level fields are dropped before the model sees them (protocol/unknown_fields.py).
    err = _error({"model": "m", "messages": [{"role": "user", "content": "x", "frobnicate": 1}]})
    assert err.param == "messages.0.frobnicate" and "Unrecognized request argument" in err.message


def test_missing_parameter():
    err = _error({"model": "m"})
    assert err.param == "messages" and err.message.startswith("Missing required parameter")


def test_shapes():
    err = APIError(404, "no such model", param="model", code="model_not_found")
    assert openai_body(err) == {
        "error": {
            "message": "no such model",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    assert anthropic_body(err) == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "no such model"},
    }
    assert anthropic_body(APIError(401, "bad key"))["error"]["type"] == "authentication_error"
