"""Render a request's prompt into token ids exactly as a replica would, for prefix matching.

Only the prompt matters here (the prefix the replica caches): the chat template with the generation
prompt for chat-style APIs, the raw text for /v1/completions. Anything this cannot render yields
None; the request is still routed, by load, and the replica reports the real error if there is one.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

API_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
}


def _text_of(content: Any) -> str:
    """Text of an OpenAI/Anthropic content field (a string or a list of typed parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return ""


def _chat_messages(body: dict) -> list[dict]:
    return [
        dict(m, content=_text_of(m.get("content"))) for m in body.get("messages", []) if isinstance(m, dict)
    ]


def _anthropic_messages(body: dict) -> list[dict]:
    messages = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text_of(system)})
    for m in body.get("messages", []):
        if isinstance(m, dict):
            messages.append({"role": m.get("role", "user"), "content": _text_of(m.get("content"))})
    return messages


def _responses_messages(body: dict) -> list[dict]:
    messages = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    data = body.get("input")
    if isinstance(data, str):
        messages.append({"role": "user", "content": data})
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and "role" in item:
                messages.append({"role": item["role"], "content": _text_of(item.get("content"))})
    return messages


def _tools(body: dict) -> list[dict] | None:
    tools = body.get("tools")
    return tools if isinstance(tools, list) and tools else None


def prompt_token_ids(tokenizer, api: str, body: dict) -> list[int] | None:
    if tokenizer is None:
        return None
    try:
        if api == "completions":
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                return prompt
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if not isinstance(prompt, str):
                return None
            return list(tokenizer.encode(prompt, add_special_tokens=True))
        messages = {
            "chat": _chat_messages,
            "messages": _anthropic_messages,
            "responses": _responses_messages,
        }[api](body)
        if not messages:
            return None
        return list(tokenizer.encode_chat(messages, tools=_tools(body), add_generation_prompt=True))
    except Exception as exc:  # a template error on odd input must not fail the routing
        log.debug("cannot render %s request for prefix matching: %r", api, exc)
        return None


def cache_salt(body: dict) -> bytes | None:
    salt = body.get("cache_salt")
    return salt.encode("utf-8") if isinstance(salt, str) and salt else None


def session_key(body: dict, headers, header_name: str) -> str | None:
    value = headers.get(header_name)
    if value:
        return value
    user = body.get("user")
    if isinstance(user, str) and user:
        return user
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        return metadata["user_id"]
    return None
