"""The gateway relays request bodies as they are: vLLM's extras and fields it does not know reach
the replica unchanged (the replica decides what to take), and those the replica takes do not stop
prefix matching."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.prompt import prompt_token_ids
from tests.support.gateway import start_gateway
from tests.support.upstream import Upstream
from tests.support.waiting import wait_until

EXTRAS = {
    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    "stop": None,
    "ignore_eos": True,
    "chat_template_kwargs": {"enable_thinking": False},
    "frobnicate": {"any": ["shape", 1]},
    "priority": 3,
}
HELLO = [{"role": "user", "content": "hi"}]
BODIES = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": HELLO, "max_tokens": 2, "stream": True}),
    "completions": ("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 2, "stream": True}),
    "messages": ("/v1/messages", {"model": "m", "messages": HELLO, "max_tokens": 2, "stream": True}),
}
# The extras a replica takes on each API (it refuses the others by name, as vLLM does).
TAKEN = {
    "chat": set(EXTRAS),
    "completions": set(EXTRAS) - {"chat_template_kwargs"},
    "messages": {"stream_options", "frobnicate", "priority"},
}


@pytest.mark.parametrize("api", sorted(BODIES))
def test_vllm_extras_and_unknown_fields_reach_the_replica_unchanged(serve, tiny_checkpoint, api):
    upstream = Upstream("a")
    gateway, gw = start_gateway(
        serve,
        [{"url": serve(upstream.app).url, "id": "a"}],
        policy="cache_aware",
        tokenizer=tiny_checkpoint,
        health_interval_s=60,
    )
    pool = gateway.pools["m"]
    wait_until(lambda: pool.block_size and pool.tokenizer, "prefix matching to be ready")
    path, body = BODIES[api]
    body = {**body, **EXTRAS}
    response = httpx.post(f"{gw.url}{path}", json=body)
    assert response.status_code == 200, response.text
    assert upstream.received == [body]
    # Rendered for prefix matching as the replica renders it, not routed blind.
    taken = {**BODIES[api][1], **{k: v for k, v in EXTRAS.items() if k in TAKEN[api]}}
    assert prompt_token_ids(pool.tokenizer, api, taken)


@pytest.mark.parametrize("policy", ["cache_aware", "session"])
def test_text_that_is_not_unicode_is_relayed_for_the_replica_to_refuse(serve, tiny_checkpoint, policy):
    # "\ud800" is valid JSON but half a surrogate pair: hashing the salt or the session key with
    # strict UTF-8 failed the routing with a 500.
    upstream = Upstream("a")
    gateway, gw = start_gateway(
        serve, [{"url": serve(upstream.app).url, "id": "a"}], policy=policy, tokenizer=tiny_checkpoint
    )
    pool = gateway.pools["m"]
    wait_until(lambda: pool.tokenizer, "the gateway's tokenizer to load")
    body = {"model": "m", "messages": HELLO, "max_tokens": 2, "cache_salt": "\ud800", "user": "\udfff"}
    response = httpx.post(
        f"{gw.url}/v1/chat/completions",
        content=json.dumps(body),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    assert upstream.received == [body]
