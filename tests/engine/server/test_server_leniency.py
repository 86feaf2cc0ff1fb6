"""What vLLM accepts, a replica accepts where it is harmless: continuous usage stats, ``stop: null``,
``ignore_eos``, ``chat_template_kwargs``, ``stream_options`` on Responses, and unknown top-level
fields (ignored, logged, counted). Fields that would change the output stay 400s naming them."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.server.protocol.prompts import request_prompt_ids
from engine.tokenizer import Tokenizer
from tests.support.replicas import API_KEY, MODEL

AUTH = {"Authorization": f"Bearer {API_KEY}"}
HELLO = [{"role": "user", "content": "Say something."}]
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}


def post(replica, path: str, body: dict) -> httpx.Response:
    return httpx.post(replica.base_url + path, json=body, headers=AUTH, timeout=60)


def ignored_fields(replica) -> dict[tuple[str, str], float]:
    text = httpx.get(replica.base_url + "/metrics").text
    return {
        (sample.labels["api"], sample.labels["field"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "chassis_ignored_request_fields"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_chat_continuous_usage_stats_counts_every_chunk(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=6, temperature=0.0, stream=True, stream_options=CONTINUOUS,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    content_chunks, last = chunks[:-1], chunks[-1]
    assert content_chunks and all(c.usage is not None for c in content_chunks)
    counts = [c.usage.completion_tokens for c in content_chunks]
    assert counts == sorted(counts) and counts[-1] == 6
    assert all(
        c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens for c in content_chunks
    )
    assert last.choices == [] and last.usage.completion_tokens == 6
    assert last.usage.prompt_tokens == content_chunks[0].usage.prompt_tokens > 0


def test_completions_continuous_usage_stats_counts_every_chunk(openai_client):
    stream = openai_client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=0.0, stream=True,
        stream_options=CONTINUOUS, extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    counts = [c.usage.completion_tokens for c in chunks[:-1]]
    assert counts and counts == sorted(counts) and counts[-1] == 5
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_include_usage_alone_leaves_the_content_chunks_without_usage(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=3, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(c.usage is None for c in chunks[:-1]) and chunks[-1].usage.completion_tokens >= 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": HELLO}),
        ("/v1/completions", {"prompt": "Once upon a time"}),
    ],
)
def test_stop_null_and_ignore_eos(replica, path, body):
    response = post(
        replica, path, {"model": MODEL, **body, "max_tokens": 7, "stop": None, "ignore_eos": True}
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["usage"]["completion_tokens"] == 7 and answer["choices"][0]["finish_reason"] == "length"


def test_chat_template_kwargs_reach_the_chat_template(replica, tiny_checkpoint):
    # The suite's chat template, like Qwen3's, opens an empty thinking block when enable_thinking is false.
    plain = {"model": MODEL, "messages": HELLO, "max_tokens": 1}
    thinking_off = {**plain, "chat_template_kwargs": {"enable_thinking": False}}
    tokenizer = Tokenizer(tiny_checkpoint)
    for body in (plain, thinking_off):
        response = post(replica, "/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        # The gateway renders the prompt the same way for prefix matching.
        assert response.json()["usage"]["prompt_tokens"] == len(request_prompt_ids(tokenizer, "chat", body))
    with_kwargs = request_prompt_ids(tokenizer, "chat", thinking_off)
    assert "<think>" in tokenizer.decode(with_kwargs, skip_special_tokens=False)
    assert len(with_kwargs) > len(request_prompt_ids(tokenizer, "chat", plain))


def test_chat_template_kwargs_cannot_set_what_the_server_sets(replica):
    body = {"model": MODEL, "messages": HELLO, "chat_template_kwargs": {"add_generation_prompt": False}}
    response = post(replica, "/v1/chat/completions", body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "chat_template_kwargs.add_generation_prompt"


def test_responses_take_stream_options(openai_client):
    events = list(
        openai_client.responses.create(
            model=MODEL,
            input="Hi there",
            max_output_tokens=4,
            stream=True,
            extra_body={"stream_options": {"include_usage": True}},
        )  # fmt: skip
    )
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.usage.output_tokens >= 1


def test_nested_objects_stay_strict(replica):
    body = {"model": MODEL, "input": "hi", "stream": True, "stream_options": {"include_usage": True, "x": 1}}
    response = post(replica, "/v1/responses", body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "stream_options.x"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi", "x": 1}]}
    response = post(replica, "/v1/chat/completions", body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages.0.x"


UNKNOWN = {"frobnicate": {"any": ["shape"]}, "priority": 3, "request_id": "abc"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": HELLO, "max_tokens": 2}),
        ("/v1/completions", {"prompt": "Once", "max_tokens": 2}),
        ("/v1/messages", {"messages": HELLO, "max_tokens": 2}),
        ("/v1/messages/count_tokens", {"messages": HELLO}),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
    ],
)
def test_unknown_top_level_fields_are_ignored_logged_and_counted(replica, path, body):
    api = path.removeprefix("/v1/")
    before = ignored_fields(replica)
    response = post(replica, path, {"model": MODEL, **body, **UNKNOWN})
    assert response.status_code == 200, response.text
    after = ignored_fields(replica)
    for field in UNKNOWN:
        assert after[(api, field)] == before.get((api, field), 0) + 1
    assert f"{api}: ignored unknown request fields 'frobnicate', 'priority', 'request_id'" in replica.log()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", {"messages": HELLO, "use_beam_search": True}, "use_beam_search"),
        ("/v1/responses", {"input": "hi", "min_p": 0.1}, "min_p"),
        ("/v1/responses", {"input": "hi", "stop": ["x"]}, "stop"),
        ("/v1/messages", {"messages": HELLO, "max_tokens": 2, "frequency_penalty": 1.0}, "frequency_penalty"),
    ],
)
def test_unknown_fields_that_change_the_output_are_refused_by_name(replica, path, body, field):
    response = post(replica, path, {"model": MODEL, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    if path.startswith("/v1/messages"):
        assert field in error["message"] and error["type"] == "invalid_request_error"
    else:
        assert error["param"] == field and "not supported" in error["message"]


def test_unknown_fields_holding_the_value_that_changes_nothing_are_ignored(replica):
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 2, "use_beam_search": False, "best_of": 1}
    assert post(replica, "/v1/chat/completions", body).status_code == 200
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 2, "n": 1, "seed": None}
    assert post(replica, "/v1/responses", body).status_code == 200


def test_sdk_extra_body_unknown_fields(openai_client, anthropic_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=2, extra_body={"priority": 1, "kv_transfer_params": None}
    )
    assert reply.choices[0].message.role == "assistant"
    message = anthropic_client.messages.create(
        model=MODEL, max_tokens=2, messages=HELLO, extra_body={"context_management": None, "priority": 1}
    )
    assert message.usage.output_tokens >= 1
