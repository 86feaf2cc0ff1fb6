"""The scripted tool-call checkpoint: transformers and our engine both decode the script greedily."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine import LLM, SamplingParams
from engine.server.tool_parsers import HermesToolParser
from engine.testing.scripted_model import (
    GET_WEATHER_TOOL,
    REPLY_PIECES,
    REPLY_TEXT,
    TOOL_ARGUMENTS,
    TOOL_NAME,
    make_scripted_tool_call_model,
    reply_token_ids,
)

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
AFTER_TOOL = [
    *ASK,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": TOOL_NAME, "arguments": json.dumps(TOOL_ARGUMENTS)}}],
    },
    {"role": "tool", "content": '{"temp_c": 18}'},
]
GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    return make_scripted_tool_call_model(tmp_path_factory.mktemp("scripted") / "scripted-qwen3")


@pytest.fixture(scope="module")
def tokenizer(scripted):
    return AutoTokenizer.from_pretrained(str(scripted))


def test_reply_pieces_are_single_ordinary_tokens(tokenizer):
    ids = reply_token_ids(tokenizer)
    assert len(set(ids)) == len(REPLY_PIECES) + 1
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    for piece, token_id in zip(REPLY_PIECES, ids, strict=False):
        assert tokenizer.encode(piece, add_special_tokens=False) == [token_id]
        # Not special: the server decodes with skip_special_tokens and must still see the text.
        assert tokenizer.decode([token_id], skip_special_tokens=True) == piece


@pytest.mark.parametrize("conversation", [ASK, AFTER_TOOL], ids=["ask", "after-tool-result"])
def test_transformers_greedy_writes_the_script(scripted, tokenizer, conversation):
    model = AutoModelForCausalLM.from_pretrained(str(scripted), dtype=torch.float32).eval()
    prompt = tokenizer.apply_chat_template(
        conversation, tools=[GET_WEATHER_TOOL], add_generation_prompt=True, tokenize=False
    )
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    generated = out[0, ids.shape[1] :].tolist()
    assert generated == reply_token_ids(tokenizer)  # stops at <|im_end|>, an eos id
    assert tokenizer.decode(generated, skip_special_tokens=True) == REPLY_TEXT


def test_our_engine_writes_the_script_and_it_parses_as_a_tool_call(scripted, tokenizer):
    llm = LLM(scripted, device="cpu", dtype="float32")
    outs = [llm.chat(c, GREEDY, tools=[GET_WEATHER_TOOL])[0] for c in (ASK, AFTER_TOOL)]
    for out in outs:
        assert out.token_ids == reply_token_ids(tokenizer)
        assert out.text == REPLY_TEXT
        assert out.finish_reason == "stop"
    parsed = HermesToolParser().parse(outs[0].text)
    assert parsed.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [(TOOL_NAME, TOOL_ARGUMENTS)]


def test_the_script_only_follows_the_generation_prompt(scripted, tokenizer):
    # A bigram model: a prompt that does not end the way the chat template does gets end-of-turn at once.
    llm = LLM(scripted, device="cpu", dtype="float32")
    out = llm.generate(tokenizer.encode("The weather in Paris", add_special_tokens=False), GREEDY)[0]
    assert out.token_ids == [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert out.text == ""
