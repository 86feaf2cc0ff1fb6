"""Request model of the OpenAI Responses API."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from engine.server.protocol.common import EveryApiExtras, Loose, Strict


class InputItem(Loose):
    """message (type omitted or "message"), function_call, function_call_output."""

    type: str | None = None
    role: str | None = None
    content: str | list[dict[str, Any]] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[dict[str, Any]] | None = None
    id: str | None = None
    status: str | None = None


class ResponseTool(Loose):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseStreamOptions(Strict):
    """Accepted for clients that send Chat's stream options here: a Responses stream always ends
    with the usage (in ``response.completed``), so these change nothing."""

    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None
    include_obfuscation: bool | None = None


class ResponsesRequest(EveryApiExtras):
    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    previous_response_id: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stream: bool = False
    stream_options: ResponseStreamOptions | None = None
    store: bool = True
    tools: list[ResponseTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    background: bool | None = None
    top_logprobs: int | None = None
    prompt: dict[str, Any] | None = None
    service_tier: str | None = None
    max_tool_calls: int | None = None
    conversation: Any | None = None
