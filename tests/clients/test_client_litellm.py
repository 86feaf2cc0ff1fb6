"""LiteLLM's ``completion``/``acompletion`` (plain and streaming) through its OpenAI-compatible
provider (``openai/<model>`` with ``api_base``), against a replica and the gateway."""

from __future__ import annotations

import asyncio
import os

# LiteLLM would otherwise fetch its model cost map from the internet when imported.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import litellm  # noqa: E402

from tests.support.replicas import API_KEY, MODEL  # noqa: E402

TOKENS = 8
MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_completion_and_acompletion_plain_and_streaming_agree(endpoint):
    request = {
        "model": f"openai/{MODEL}", "api_base": endpoint.v1, "api_key": API_KEY, "messages": MESSAGES,
        "max_tokens": TOKENS, "temperature": 0.0, "extra_body": {"ignore_eos": True}, "num_retries": 0,
        "timeout": 60,
    }  # fmt: skip
    reply = litellm.completion(**request)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == TOKENS
    text = reply.choices[0].message.content

    chunks = list(litellm.completion(**request, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    rebuilt = litellm.stream_chunk_builder(chunks, messages=MESSAGES)
    assert rebuilt.choices[0].message.content == text and rebuilt.usage.completion_tokens == TOKENS

    async def both():
        whole = await litellm.acompletion(**request)
        stream = await litellm.acompletion(**request, stream=True)
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        return whole.choices[0].message.content, "".join(parts)

    assert asyncio.run(both()) == (text, text)
