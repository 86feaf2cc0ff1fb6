"""The gateway speaks a replica's API beside generation: model cards, token counting, /tokenize and
/detokenize, JSON errors for unknown paths and methods, one ``date`` and one ``server`` header.

A real ``chassis serve`` replica of the tiny model sits behind an in-process gateway; each answer
through the gateway is compared with the replica's own."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.support.gateway import start_gateway
from tests.support.replicas import API_KEY, MODEL, start_replica, stop_replica
from tests.support.servers import ServerThread

AUTH = {"Authorization": f"Bearer {API_KEY}"}
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def replica(tiny_checkpoint, tmp_path_factory):
    running = start_replica(tiny_checkpoint, tmp_path_factory.mktemp("logs"), "--num-gpu-blocks", "64")
    yield running
    stop_replica(running)


@pytest.fixture(scope="module")
def gateway(replica):
    gateway, server = start_gateway(
        lambda app: ServerThread(app).start(),
        [{"url": replica.base_url, "id": "r0"}],
        model=MODEL,
        replica_api_key=API_KEY,
    )
    yield gateway, server.url
    server.stop()


@pytest.fixture(scope="module")
def gw_url(gateway) -> str:
    return gateway[1]


def both(replica, gw_url, method: str, path: str, body: dict | None = None) -> tuple[httpx.Response, ...]:
    """The same request to the replica (with its key) and to the gateway (which adds the key)."""
    direct = httpx.request(method, replica.base_url + path, json=body, headers=AUTH)
    return direct, httpx.request(method, gw_url + path, json=body)


def test_openai_sdk_lists_and_retrieves_the_replicas_model_card(replica, gw_url, tiny_checkpoint):
    via_gateway = openai.OpenAI(base_url=f"{gw_url}/v1", api_key="unused", max_retries=0)
    direct = openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key=API_KEY, max_retries=0)
    (listed,) = via_gateway.models.list().data
    retrieved = via_gateway.models.retrieve(MODEL)
    expected = direct.models.retrieve(MODEL).model_dump(exclude={"created"})
    assert expected["root"] == str(tiny_checkpoint) and expected["parent"] is None
    assert listed.model_dump(exclude={"created"}) == expected
    assert retrieved.model_dump(exclude={"created"}) == expected
    with pytest.raises(openai.NotFoundError) as info:
        via_gateway.models.retrieve("no-such-model")
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"


def test_anthropic_sdk_counts_tokens_through_the_gateway(replica, gw_url):
    via_gateway = anthropic.Anthropic(base_url=gw_url, api_key="unused", max_retries=0)
    direct = anthropic.Anthropic(base_url=replica.base_url, api_key=API_KEY, max_retries=0)
    counted = via_gateway.messages.count_tokens(model=MODEL, messages=HELLO)
    assert counted.input_tokens == direct.messages.count_tokens(model=MODEL, messages=HELLO).input_tokens
    with pytest.raises(anthropic.NotFoundError) as info:
        via_gateway.messages.count_tokens(model="no-such-model", messages=HELLO)
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tokenize", {"model": MODEL, "prompt": "The capital of France is", "return_token_strs": True}),
        ("/tokenize", {"prompt": "no model named: the gateway serves one"}),
        ("/tokenize", {"model": MODEL, "messages": HELLO, "add_generation_prompt": False}),
        ("/detokenize", {"model": MODEL, "tokens": [1, 2, 3, 4]}),
    ],
)
def test_tokenizer_routes_answer_as_the_replica_does(replica, gw_url, path, body):
    direct, proxied = both(replica, gw_url, "POST", path, body)
    assert direct.status_code == proxied.status_code == 200, proxied.text
    assert proxied.json() == direct.json()
    assert proxied.headers["x-chassis-replica"] == "r0"


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/detokenize", {"model": MODEL, "tokens": [-1]}, 400, "tokens[0]"),
        ("/detokenize", {"model": MODEL, "tokens": [5, 2**64]}, 400, "tokens[1]"),
        ("/detokenize", {"model": MODEL, "tokens": [10**6]}, 400, "tokens[0]"),
        ("/tokenize", {"model": MODEL, "prompt": "hi", "messages": HELLO}, 400, "prompt"),
        ("/tokenize", {"model": "no-such-model", "prompt": "hi"}, 404, "model"),
        ("/detokenize", {"model": "no-such-model", "tokens": [1]}, 404, "model"),
    ],
)
def test_bad_tokenizer_requests_are_client_errors_naming_the_field(
    gateway, gw_url, path, body, status, param
):
    response = httpx.post(gw_url + path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param
    replica = gateway[0].pools[MODEL].replicas["r0"]
    assert replica.routable and replica.breaker.state == "closed"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/no/such/path", 404),
        ("POST", "/v1/nothing-here", 404),
        ("GET", "/v1/chat/completions", 405),
        ("POST", "/v1/models", 405),
        ("DELETE", "/tokenize", 405),
        ("GET", "/v1/messages/count_tokens", 405),
    ],
)
def test_unknown_paths_and_methods_get_the_replicas_error_shape(replica, gw_url, method, path, status):
    direct, proxied = both(replica, gw_url, method, path)
    assert direct.status_code == proxied.status_code == status
    if path.startswith("/v1/messages"):
        assert proxied.json()["type"] == direct.json()["type"] == "error"
        error = proxied.json()["error"]
    else:
        error = proxied.json()["error"]
        assert error["type"] == direct.json()["error"]["type"] == "invalid_request_error"
    assert path in error["message"]
    if status == 405:
        allowed = {m.strip() for m in proxied.headers["allow"].split(",")}
        assert {m.strip() for m in direct.headers["allow"].split(",")} <= allowed  # Starlette adds HEAD


def test_every_gateway_response_has_one_date_and_one_server_header(gw_url):
    chat = {"model": MODEL, "messages": HELLO, "max_tokens": 2}
    responses = [
        httpx.get(gw_url + "/v1/models"),
        httpx.get(gw_url + "/nope"),
        httpx.post(gw_url + "/tokenize", json={"prompt": "hi"}),
        httpx.post(gw_url + "/detokenize", json={"tokens": [-1]}),
        httpx.post(gw_url + "/v1/chat/completions", json=chat),
    ]
    with httpx.stream("POST", gw_url + "/v1/chat/completions", json={**chat, "stream": True}) as streamed:
        streamed.read()
    for response in [*responses, streamed]:
        assert len(response.headers.get_list("date")) == 1, (response.url, response.headers)
        assert len(response.headers.get_list("server")) == 1, (response.url, response.headers)
    assert streamed.headers["x-chassis-replica"] == "r0"


def test_a_stored_response_is_fetched_from_the_replica_that_made_it(gw_url):
    client = openai.OpenAI(base_url=f"{gw_url}/v1", api_key="unused", max_retries=0)
    created = client.responses.create(model=MODEL, input="Hi there", max_output_tokens=4, temperature=0.0)
    fetched = client.responses.retrieve(created.id)
    assert fetched.id == created.id and fetched.output_text == created.output_text
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve("resp_never_made")
    assert info.value.body["param"] == "response_id"
