"""Bad input gets the right status and error body, and the replica keeps serving afterwards."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from tests.support.replicas import API_KEY, MAX_MODEL_LEN, MODEL

AUTH = {"Authorization": f"Bearer {API_KEY}"}
HELLO = [{"role": "user", "content": "hi"}]


def post(replica, path: str, body, headers=AUTH) -> httpx.Response:
    if isinstance(body, (bytes, str)):
        return httpx.post(
            replica.base_url + path, content=body, headers={**headers, "content-type": "application/json"}
        )
    return httpx.post(replica.base_url + path, json=body, headers=headers)


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"]
    if param is not None:
        assert error["param"] == param
    return error


def test_malformed_json(replica):
    error = assert_openai_error(post(replica, "/v1/chat/completions", b'{"model": "x", "messages": ['), 400)
    assert "not valid JSON" in error["message"]
    assert_openai_error(post(replica, "/v1/completions", b"[1, 2]"), 400)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_tokens": "lots"}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"messages": "hello"}, "messages"),
        ({"logit_bias": {"42": 3}}, "logit_bias"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"guided_json": {"type": "frob"}}, "guided_json"),
        ({"use_beam_search": True}, "use_beam_search"),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
def test_invalid_or_unsupported_parameters_are_named(replica, extra, param):
    assert_openai_error(
        post(replica, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, **extra}), 400, param
    )


@pytest.mark.parametrize("seed", [2**64, 2**63, -(2**63) - 1, 10**30])
def test_seed_out_of_range_is_named(replica, seed):
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 2, "seed": seed}
    assert_openai_error(post(replica, "/v1/chat/completions", body), 400, "seed")
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2, "seed": seed}
    assert_openai_error(post(replica, "/v1/completions", body), 400, "seed")


@pytest.mark.parametrize("bad_id", [-1, 10**9, 2**63, 2**64 + 1, -(2**70)])
@pytest.mark.parametrize(("nested", "stream"), [(False, False), (True, False), (False, True)])
def test_prompt_token_ids_outside_the_vocabulary_are_named(replica, bad_id, nested, stream):
    prompt = [1, 2, bad_id]
    body = {"model": MODEL, "prompt": [prompt] if nested else prompt, "max_tokens": 2, "stream": stream}
    error = assert_openai_error(post(replica, "/v1/completions", body), 400, "prompt")
    assert str(bad_id) in error["message"]


def test_deeply_nested_json_is_400(replica):
    depth = 100_000
    body = '{"model": "x", "messages": ' + "[" * depth + "]" * depth + "}"
    error = assert_openai_error(post(replica, "/v1/chat/completions", body), 400)
    assert "nested" in error["message"]
    response = post(replica, "/v1/messages", body, headers={"x-api-key": API_KEY})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_unknown_model_is_404(openai_client):
    with pytest.raises(openai.NotFoundError) as info:
        openai_client.chat.completions.create(model="no-such-model", messages=HELLO)
    assert info.value.body["param"] == "model"


def test_over_long_prompt_is_400(openai_client):
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "word " * MAX_MODEL_LEN}]
        )
    assert "maximum context length" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.completions.create(model=MODEL, prompt="hello", max_tokens=MAX_MODEL_LEN)
    assert info.value.body["param"] == "max_tokens"


def test_wrong_key_is_401(replica):
    bad = openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert_openai_error(
        post(replica, "/v1/chat/completions", {"model": MODEL, "messages": HELLO}, headers={}), 401
    )
    bad_anthropic = anthropic.Anthropic(base_url=replica.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as info:
        bad_anthropic.messages.create(model=MODEL, max_tokens=4, messages=HELLO)
    assert info.value.body["error"]["type"] == "authentication_error"


def test_anthropic_routes_use_anthropic_error_shape(replica):
    response = post(
        replica, "/v1/messages", {"model": MODEL, "messages": HELLO}, headers={"x-api-key": API_KEY}
    )
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    response = post(
        replica,
        "/v1/messages",
        {"model": "nope", "max_tokens": 3, "messages": HELLO},
        headers={"x-api-key": API_KEY},
    )
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_unknown_route_is_openai_shaped_404(replica):
    assert_openai_error(httpx.get(replica.base_url + "/v1/nothing-here", headers=AUTH), 404)


def test_still_serving_after_bad_input(replica, openai_client):
    assert httpx.get(replica.base_url + "/health").status_code == 200
    result = openai_client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3)
    assert result.choices[0].message.content is not None


def test_sampling_parameter_refused_by_the_engine_is_named(replica):
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 1, "min_tokens": 2}
    assert_openai_error(post(replica, "/v1/chat/completions", body), 400, "min_tokens")


def test_anthropic_conversation_without_content_names_messages(replica):
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": []}]}
    response = post(replica, "/v1/messages", body, headers={"x-api-key": API_KEY})
    assert response.status_code == 400, response.text
    assert "'messages'" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/responses",
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
            "input[0].content[0].text",
        ),
        (
            "/v1/responses",
            {
                "input": [
                    {"type": "function_call_output", "call_id": "c", "output": [{"type": "text", "text": {}}]}
                ]
            },
            "input[0].content[0].text",
        ),
        ("/v1/responses", {"input": "hi", "text": {"format": "json"}}, "text.format"),
        ("/v1/responses", {"input": "hi", "text": {"format": [1]}}, "text.format"),
    ],
)
def test_responses_content_of_the_wrong_type_is_named(replica, path, body, param):
    body = {"model": MODEL, "max_output_tokens": 2, **body}
    assert_openai_error(post(replica, path, body), 400, param)


def test_anthropic_tool_result_text_of_the_wrong_type_is_named(replica):
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": 5}]}
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [result]}]}
    response = post(replica, "/v1/messages", body, headers={"x-api-key": API_KEY})
    assert response.status_code == 400, response.text
    assert "messages[0].content[0].content[0].text" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi \ud800"}]},
            "messages[0].content",
        ),
        # The salt reached the engine core, whose loop crashed hashing it: the replica died.
        ("/v1/chat/completions", {"messages": HELLO, "cache_salt": "\ud800"}, "cache_salt"),
        ("/v1/completions", {"prompt": "\udfff"}, "prompt"),
        ("/v1/responses", {"input": "hi", "x\udfff": 1}, "x\\udfff"),
    ],
)
def test_lone_surrogates_are_named_not_server_errors(replica, openai_client, path, body, param):
    # json.dumps escapes half a surrogate pair as "\ud800": valid JSON, but not Unicode text.
    body = {"model": MODEL, "max_tokens" if path != "/v1/responses" else "max_output_tokens": 2, **body}
    assert_openai_error(post(replica, path, json.dumps(body)), 400, param)
    result = openai_client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
    assert result.choices[0].finish_reason in ("length", "stop")
