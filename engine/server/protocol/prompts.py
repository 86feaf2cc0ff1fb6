"""A request body's prompt as token ids, rendered exactly as a replica renders it.

The public entry for other deployables (the gateway's prefix matching): it takes a raw JSON body
and a tokenizer, and returns the ids the replica would prefill, through the replica's own converters.
"""

from __future__ import annotations

from engine.server.api import anthropic_messages, openai_chat, responses
from engine.server.api.completions import prompt_ids
from engine.server.api.response_store import ResponseStore
from engine.server.protocol.anthropic import MessagesRequest
from engine.server.protocol.openai import ChatCompletionRequest, CompletionRequest
from engine.server.protocol.responses import ResponsesRequest
from engine.server.protocol.unknown_fields import validate_lenient

APIS = ("chat", "completions", "messages", "responses")


def request_prompt_ids(tokenizer, api: str, body: dict) -> list[int] | None:
    """The prompt ids of ``body`` for ``api`` (one of APIS); None when there is nothing to render.
    Raises (pydantic's ValidationError, ValueError) for a body the replica would reject."""
    if api == "completions":
        return prompt_ids(validate_lenient(CompletionRequest, body)[0], tokenizer)
    conversation = _conversation(api, body)
    if not conversation.messages:
        return None
    return conversation.encode(tokenizer)  # as the replica's ServerState.render does


def _conversation(api: str, body: dict):
    if api == "chat":
        return openai_chat.to_conversation(validate_lenient(ChatCompletionRequest, body)[0])[0]
    if api == "messages":
        return anthropic_messages.to_conversation(validate_lenient(MessagesRequest, body)[0])[0]
    if api == "responses":
        # A previous_response_id lives on one replica only; its history is unknown here, so such a
        # request does not render (the gateway's response affinity map routes it instead).
        return responses.to_conversation(validate_lenient(ResponsesRequest, body)[0], ResponseStore(1))[0]
    raise ValueError(f"unknown API {api!r}; expected one of {', '.join(APIS)}")
