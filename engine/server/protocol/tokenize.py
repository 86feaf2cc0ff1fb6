"""Request models of vLLM's tokenizer routes, /tokenize and /detokenize."""

from __future__ import annotations

from typing import Any

from engine.server.protocol.common import Strict
from engine.server.protocol.openai import ChatMessage, ToolDef


class TokenizeRequest(Strict):
    """One of ``prompt`` (raw text) or ``messages`` (rendered through the chat template, as a chat
    completion's prompt is). ``model`` may be left out: a replica serves one model."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[ToolDef] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # vLLM's default: true for a prompt, false for messages (the chat template writes them).
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(Strict):
    model: str | None = None
    tokens: list[int]
