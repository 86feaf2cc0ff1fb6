"""Render a request's prompt into token ids exactly as a replica would, for prefix matching.

Only the prompt matters here (the prefix the replica caches): the chat template with the generation
prompt for chat-style APIs, the raw text for /v1/completions. Anything this cannot render yields
None; the request is still routed, by load, and the replica reports the real error if there is one.
"""

from __future__ import annotations

import logging

from engine.kv.block_hash import salt_bytes

log = logging.getLogger(__name__)

API_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
}


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def prompt_token_ids(tokenizer, api: str, body: dict) -> list[int] | None:
    if tokenizer is None:
        return None
    try:
        from engine.server.protocol.prompts import request_prompt_ids  # torch-free, but not cheap

        ids = request_prompt_ids(tokenizer, api, body)
    except Exception as exc:  # invalid input is the replica's to reject; routing must not fail on it
        log.debug("cannot render %s request for prefix matching: %r", api, exc)
        return None
    # A client's own token ids may not fit the chain's int64 packing; the replica refuses them anyway.
    if ids and not (_INT64_MIN <= min(ids) and max(ids) <= _INT64_MAX):
        return None
    return ids


def cache_salt(api: str, body: dict) -> bytes | None:
    if api not in ("chat", "completions"):  # the replica salts only these two APIs
        return None
    salt = body.get("cache_salt")
    return salt_bytes(salt) if isinstance(salt, str) else None


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
