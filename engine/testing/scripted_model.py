"""A tiny real checkpoint whose greedy decoding answers every chat prompt with one tool call.

Random tiny models never write a tool call, so the server's tool-call path could not be driven
end to end. This builds a qwen3 checkpoint (same tokenizer and chat template as
``engine.testing.tiny_model``) that is a bigram model of the last token:

- the pieces of the reply are added to the tokenizer as ordinary (non-special) tokens, each
  unique, so every step of the reply has exactly one predecessor token;
- every attention output projection and MLP down projection is zero, so the residual stream that
  reaches the final norm is the embedding of the last token, whatever came before it;
- the embedding gives each predecessor its own axis plus a shared "bias" axis, and ``lm_head``
  reads the successor off the predecessor's axis; every other token leads to ``<|im_end|>``.

The reply starts from the last token of the rendered generation prompt (``<|im_start|>assistant\\n``),
so any chat request gets it. Nothing here is mocked: it is a safetensors checkpoint that our
engine and ``transformers`` both load and decode greedily to the same tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.testing.tiny_model import make_tiny_model

TOOL_NAME = "get_weather"
TOOL_ARGUMENTS = {"city": "Paris"}
# Split inside the JSON so a stream delivers the call over several chunks.
REPLY_PIECES = (
    "<tool_call>",
    '\n{"name": "get_weather", "arguments": ',
    '{"city": "Par',
    'is"}}',
    "\n</tool_call>",
)
REPLY_TEXT = "".join(REPLY_PIECES)
# The same call in DeepSeek-V3.1's layout (engine/server/tool_parsers/deepseek.py), its markers
# tokens of their own as in DeepSeek's tokenizer.
DEEPSEEK_REPLY_PIECES = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "get_weather",
    "<｜tool▁sep｜>",
    '{"city": "Par',
    'is"}',
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
)
END_OF_TURN = "<|im_end|>"
GET_WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}
# OpenAI Chat Completions tool schema for the call the model makes.
GET_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Current weather in a city",
        "parameters": GET_WEATHER_PARAMETERS,
    },
}

_BIAS_AXIS = 0  # every token has 1 here; lm_head[<|im_end|>] reads it
_AXIS_SCALE = 2.0  # a predecessor's own axis, relative to the bias axis
_SUCCESSOR_GAIN = 10.0  # lm_head weight of a scripted successor on its predecessor's axis


def make_scripted_tool_call_model(out_dir: str | Path) -> Path:
    """Write the checkpoint into ``out_dir`` and return the directory (float32, qwen3, CPU-sized)."""
    return make_scripted_model(out_dir, REPLY_PIECES)


def make_scripted_deepseek_tool_call_model(out_dir: str | Path) -> Path:
    """The tool-calling checkpoint with DeepSeek's tool-call markers and a template that renders them."""
    from importlib import resources

    template = resources.files("engine.testing.tiny_templates").joinpath("deepseek_tools.jinja").read_text()
    return make_scripted_model(out_dir, DEEPSEEK_REPLY_PIECES, chat_template=template)


def make_scripted_model(
    out_dir: str | Path, pieces: tuple[str, ...], chat_template: str | None = None
) -> Path:
    """A checkpoint whose greedy reply to any chat prompt is ``pieces`` then end of turn; with
    ``chat_template`` replacing the tiny qwen3 one (engine.testing.scripted_thinking uses both)."""
    out = make_tiny_model(out_dir, arch="qwen3", seed=0, dtype="float32")
    tokenizer = _add_reply_tokens(out, pieces, chat_template)
    chain = scripted_token_ids(tokenizer, pieces)
    hidden = _rewrite_config(out, vocab_size=len(tokenizer))
    _rewrite_weights(out, chain, vocab_size=len(tokenizer), hidden=hidden)
    return out


def scripted_token_ids(tokenizer, pieces: tuple[str, ...] = REPLY_PIECES) -> list[int]:
    """Token ids of the script: the generation prompt's last token, the reply pieces, end of turn."""
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    last_prompt_token = tokenizer.encode(prompt, add_special_tokens=False)[-1]
    ids = [tokenizer.convert_tokens_to_ids(p) for p in (*pieces, END_OF_TURN)]
    return [last_prompt_token, *ids]


def reply_token_ids(tokenizer, pieces: tuple[str, ...] = REPLY_PIECES) -> list[int]:
    """What greedy decoding generates: the reply pieces and the end-of-turn token."""
    return scripted_token_ids(tokenizer, pieces)[1:]


def _add_reply_tokens(out: Path, pieces: tuple[str, ...], chat_template: str | None):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    known = set(tokenizer.get_vocab())
    missing = [p for p in pieces if p not in known]
    tokenizer.add_tokens(missing, special_tokens=False)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(out)
    return tokenizer


def _rewrite_config(out: Path, vocab_size: int) -> int:
    path = out / "config.json"
    config = json.loads(path.read_text())
    # Untied: the embedding and lm_head play different roles in a bigram table.
    config.update(vocab_size=vocab_size, tie_word_embeddings=False)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return int(config["hidden_size"])


def _rewrite_weights(out: Path, chain: list[int], vocab_size: int, hidden: int) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    path = out / "model.safetensors"
    tensors = load_file(str(path))
    predecessors = chain[:-1]
    if len(set(predecessors)) != len(predecessors):
        raise ValueError(f"script tokens must be unique to form a bigram chain, got {chain}")
    if len(predecessors) + 1 > hidden:
        raise ValueError(f"{len(predecessors)} script steps need more than hidden_size={hidden} axes")
    end_of_turn = chain[-1]

    embed = torch.zeros(vocab_size, hidden)
    embed[:, _BIAS_AXIS] = 1.0
    lm_head = torch.zeros(vocab_size, hidden)
    lm_head[:, _BIAS_AXIS] = -1.0  # unscripted tokens lose to <|im_end|> by a wide margin
    lm_head[end_of_turn, _BIAS_AXIS] = 1.0
    for axis, (token, successor) in enumerate(zip(chain[:-1], chain[1:], strict=True), start=1):
        embed[token, axis] = _AXIS_SCALE
        lm_head[successor, axis] = _SUCCESSOR_GAIN
    tensors["model.embed_tokens.weight"] = embed
    tensors["lm_head.weight"] = lm_head
    tensors["model.norm.weight"] = torch.ones(hidden)
    for name in list(tensors):
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            tensors[name] = torch.zeros_like(tensors[name])
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})
