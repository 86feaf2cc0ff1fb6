"""The replica's API surface beside generation: model cards, vLLM's /tokenize and /detokenize, JSON
errors for unknown paths and methods, and exactly one ``date`` and ``server`` header."""

from __future__ import annotations

import httpx
import openai
import pytest

from engine.tokenizer import Tokenizer
from tests.support.replicas import API_KEY, MAX_MODEL_LEN, MODEL

AUTH = {"Authorization": f"Bearer {API_KEY}"}
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint) -> Tokenizer:
    return Tokenizer(tiny_checkpoint)


def post(replica, path: str, body: dict) -> httpx.Response:
    return httpx.post(replica.base_url + path, json=body, headers=AUTH)


def test_model_cards_name_the_checkpoint_as_root_and_no_parent(openai_client, tiny_checkpoint):
    (listed,) = openai_client.models.list().data
    retrieved = openai_client.models.retrieve(MODEL)
    for card in (listed, retrieved):
        assert card.id == MODEL and card.object == "model"
        assert card.model_extra["root"] == str(tiny_checkpoint)
        assert card.model_extra["parent"] is None
        assert card.model_extra["max_model_len"] == MAX_MODEL_LEN


def test_retrieving_an_unknown_model_is_an_openai_404(openai_client):
    with pytest.raises(openai.NotFoundError) as info:
        openai_client.models.retrieve("no-such-model")
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"


def test_tokenize_a_prompt_as_the_checkpoint_tokenizer_does(replica, tokenizer):
    text = "The capital of France is"
    body = post(replica, "/tokenize", {"model": MODEL, "prompt": text, "return_token_strs": True}).json()
    assert body["tokens"] == tokenizer.encode(text, add_special_tokens=True)
    assert body["count"] == len(body["tokens"]) and body["max_model_len"] == MAX_MODEL_LEN
    assert body["token_strs"] == tokenizer.hf.convert_ids_to_tokens(body["tokens"])
    plain = post(replica, "/tokenize", {"prompt": text, "add_special_tokens": False}).json()
    assert plain["tokens"] == tokenizer.encode(text, add_special_tokens=False)
    assert plain["token_strs"] is None


def test_tokenize_messages_renders_the_chat_template(replica, tokenizer, anthropic_client):
    with_prompt = post(replica, "/tokenize", {"model": MODEL, "messages": HELLO}).json()
    without = post(replica, "/tokenize", {"messages": HELLO, "add_generation_prompt": False}).json()
    assert with_prompt["tokens"] == tokenizer.encode_chat(HELLO, add_generation_prompt=True)
    assert without["tokens"] == tokenizer.encode_chat(HELLO, add_generation_prompt=False)
    assert with_prompt["tokens"][: without["count"]] == without["tokens"]
    assert with_prompt["count"] > without["count"]
    # The same conversation counted by the Anthropic API: one rendering for every API.
    counted = anthropic_client.messages.count_tokens(model=MODEL, messages=HELLO)
    assert counted.input_tokens == with_prompt["count"]


def test_detokenize_inverts_tokenize(replica):
    text = "Hello, world! <|im_end|> stays text here"
    tokens = post(replica, "/tokenize", {"prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert post(replica, "/detokenize", {"model": MODEL, "tokens": tokens}).json() == {"prompt": text}
    assert post(replica, "/detokenize", {"tokens": []}).json() == {"prompt": ""}


@pytest.mark.parametrize("bad", [-1, "vocab", 2**63, 2**64 + 1, -(2**70)])
def test_detokenize_refuses_ids_outside_the_vocabulary(replica, tokenizer, bad):
    bad = tokenizer.vocab_size if bad == "vocab" else bad
    response = post(replica, "/detokenize", {"tokens": [1, bad]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "tokens[1]" and str(bad) in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"model": "nope", "prompt": "hi"}, 404, "model"),
        ("/detokenize", {"model": "nope", "tokens": [1]}, 404, "model"),
        ("/tokenize", {"prompt": "hi", "messages": HELLO}, 400, "prompt"),
        ("/tokenize", {"model": MODEL}, 400, "prompt"),
        ("/tokenize", {"prompt": 5}, 400, "prompt"),
        ("/tokenize", {"messages": HELLO, "add_special_tokens": True}, 400, "add_special_tokens"),
        ("/tokenize", {"messages": HELLO, "continue_final_message": True}, 400, "continue_final_message"),
        ("/detokenize", {"tokens": "1 2"}, 400, "tokens"),
        ("/detokenize", {}, 400, "tokens"),
    ],
)
def test_bad_tokenizer_requests_name_the_field(replica, path, body, status, param):
    response = post(replica, path, body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param


def test_tokenizer_routes_need_the_api_key(replica):
    response = httpx.post(replica.base_url + "/tokenize", json={"prompt": "hi"})
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/no/such/path", 404),
        ("POST", "/v1/nothing-here", 404),
        ("GET", "/v1/chat/completions", 405),
        ("POST", "/v1/models", 405),
        ("DELETE", "/tokenize", 405),
        ("PUT", "/health", 405),
    ],
)
def test_unknown_paths_and_methods_are_openai_shaped(replica, method, path, status):
    response = httpx.request(method, replica.base_url + path, headers=AUTH)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and path in error["message"]
    if status == 405:
        assert method in error["message"] and response.headers["allow"]


def test_unknown_paths_and_methods_under_messages_are_anthropic_shaped(replica):
    for method, path, status in [("POST", "/v1/messages/nope", 404), ("GET", "/v1/messages", 405)]:
        response = httpx.request(method, replica.base_url + path, headers=AUTH)
        assert response.status_code == status
        body = response.json()
        assert body["type"] == "error" and path in body["error"]["message"]


def assert_one_date_and_server(response: httpx.Response) -> None:
    assert len(response.headers.get_list("date")) == 1, response.headers
    assert len(response.headers.get_list("server")) == 1, response.headers


def test_every_response_has_one_date_and_one_server_header(replica):
    base = replica.base_url
    chat = {"model": MODEL, "messages": HELLO, "max_tokens": 2}
    assert_one_date_and_server(httpx.get(base + "/health"))
    assert_one_date_and_server(httpx.get(base + "/v1/models", headers=AUTH))
    assert_one_date_and_server(httpx.get(base + "/nope"))
    assert_one_date_and_server(post(replica, "/tokenize", {"prompt": "hi"}))
    assert_one_date_and_server(post(replica, "/v1/chat/completions", chat))
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json={**chat, "stream": True}, headers=AUTH
    ) as r:
        assert_one_date_and_server(r)
        r.read()
