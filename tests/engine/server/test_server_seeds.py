"""Seeds on all four APIs through the official SDKs (issue 20 item 3): the same sampled request with
the same seed gives the same text twice; DeepSeek's ``seq_seed`` is the same seed under another name;
both names with different values are a 400 naming ``seq_seed``."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.support.replicas import MODEL

HELLO = [{"role": "user", "content": "Tell me a story."}]
SAMPLED = {"temperature": 1.0, "top_p": 1.0}


def chat(client, anthropic_client, seed_field: dict) -> str:
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=12, extra_body=seed_field, **SAMPLED
    )
    return reply.choices[0].message.content


def completion(client, anthropic_client, seed_field: dict) -> str:
    reply = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=12, extra_body=seed_field, **SAMPLED
    )
    return reply.choices[0].text


def response(client, anthropic_client, seed_field: dict) -> str:
    reply = client.responses.create(
        model=MODEL, input=HELLO, max_output_tokens=12, extra_body=seed_field, **SAMPLED
    )
    return reply.output_text


def message(client, anthropic_client, seed_field: dict) -> str:
    # This SDK version's messages.create() takes no temperature or top_p: they travel as extra_body.
    reply = anthropic_client.messages.create(
        model=MODEL, messages=HELLO, max_tokens=12, extra_body={**SAMPLED, **seed_field}
    )
    return "".join(block.text for block in reply.content if block.type == "text")


APIS = [chat, completion, response, message]


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.__name__)
def test_same_seed_same_text_and_seq_seed_is_the_same_seed(openai_client, anthropic_client, api):
    first = api(openai_client, anthropic_client, {"seed": 1234})
    assert first and api(openai_client, anthropic_client, {"seed": 1234}) == first
    assert api(openai_client, anthropic_client, {"seq_seed": 1234}) == first
    # Seeds matter: over three other seeds at temperature 1 the text cannot stay the same.
    others = {api(openai_client, anthropic_client, {"seed": seed}) for seed in (1, 2, 3)}
    assert others != {first}


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.__name__)
def test_seed_and_a_different_seq_seed_are_a_400(openai_client, anthropic_client, api):
    with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as raised:
        api(openai_client, anthropic_client, {"seed": 1, "seq_seed": 2})
    assert "seq_seed" in str(raised.value)
