"""LangChain's ``ChatOpenAI`` (langchain-openai) against a replica and the gateway: invoke, stream,
ainvoke, astream, and a tool bound with ``bind_tools`` reaching the chat template."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from tests.support.replicas import API_KEY, MODEL

TOKENS = 8
MESSAGES = [SystemMessage("Be terse."), HumanMessage("Say hello.")]


def chat_model(endpoint, **extra) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL, base_url=endpoint.v1, api_key=API_KEY, temperature=0.0, max_tokens=TOKENS,
        max_retries=0, timeout=60, extra_body={"ignore_eos": True}, **extra,
    )  # fmt: skip


def test_invoke_stream_and_async_agree(endpoint):
    llm = chat_model(endpoint, stream_usage=True)
    reply = llm.invoke(MESSAGES)
    assert reply.response_metadata["finish_reason"] == "length"
    assert reply.usage_metadata["output_tokens"] == TOKENS
    text = reply.content

    chunks = list(llm.stream(MESSAGES))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    merged = sum(chunks[1:], chunks[0])
    assert merged.content == text and merged.usage_metadata["output_tokens"] == TOKENS

    async def both():
        whole = await llm.ainvoke(MESSAGES)
        return whole.content, "".join([c.content async for c in llm.astream(MESSAGES)])

    assert asyncio.run(both()) == (text, text)


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return "sunny"


def test_bind_tools_reaches_the_prompt(endpoint):
    llm = chat_model(endpoint)
    plain = llm.invoke(MESSAGES)
    with_tool = llm.bind_tools([get_weather]).invoke(MESSAGES)
    # The tool's schema is rendered into the prompt by the chat template.
    assert with_tool.usage_metadata["input_tokens"] > plain.usage_metadata["input_tokens"]
    assert with_tool.usage_metadata["output_tokens"] == TOKENS
