"""Helpers every API module uses: ids, timestamps, usage, token text for logprobs, model check."""

from __future__ import annotations

import time
import uuid
from functools import lru_cache
from typing import Any

from engine.server.conversation import Usage
from engine.server.errors import APIError, bad_request
from engine.server.sse import data_event


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def openai_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def openai_answer(id_prefix: str, kind: str, model: str, choices: list[dict[str, Any]], usage: Usage) -> dict:
    """A whole (not streamed) Chat Completions or Completions answer around its choices."""
    return {
        "id": new_id(id_prefix),
        "object": kind,
        "created": now(),
        "model": model,
        "choices": choices,
        "usage": openai_usage(usage),
        "system_fingerprint": None,
    }


class OpenAIChunks:
    """The chunks of one Chat Completions or Completions stream, with vLLM's ``stream_options``:
    ``include_usage`` ends the stream with a usage chunk and gives every other chunk ``"usage": null``;
    with ``continuous_usage_stats`` as well, every chunk carries the call's usage so far instead."""

    def __init__(self, req: Any, id_prefix: str, kind: str, model: str) -> None:
        options = req.stream_options
        self.include_usage = bool(options and options.include_usage)
        self.continuous_usage = self.include_usage and bool(options.continuous_usage_stats)
        self.base = {"id": new_id(id_prefix), "object": kind, "created": now(), "model": model}

    def chunk(self, choice: dict[str, Any], usage: Usage) -> str:
        payload = {**self.base, "choices": [choice]}
        if self.include_usage:
            payload["usage"] = openai_usage(usage) if self.continuous_usage else None
        return data_event(payload)

    def usage_chunk(self, usage: Usage) -> str:
        return data_event({**self.base, "choices": [], "usage": openai_usage(usage)})


def part_text(part: dict[str, Any], where: str) -> str:
    """The text of a content part given as a plain JSON object (no model checked its fields)."""
    text = part.get("text")
    if text is not None and not isinstance(text, str):
        raise bad_request(f"{where}.text must be a string.", param=f"{where}.text")
    return text or ""


def check_model(requested: str, served: list[str]) -> str:
    if requested not in served:
        raise APIError(404, f"The model `{requested}` does not exist.", param="model", code="model_not_found")
    return requested


class TokenText:
    """Text of single token ids (for logprobs), cached: the same ids recur constantly."""

    def __init__(self, tokenizer: Any):
        self._decode = lru_cache(maxsize=65536)(lambda token_id: tokenizer.decode([token_id]))

    def __call__(self, token_id: int) -> str:
        return self._decode(token_id)
