"""Request models of Anthropic Messages and count_tokens."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from engine.server.protocol.common import EveryApiExtras, Loose, Strict


class ContentBlock(Loose):
    """text | tool_use | tool_result (image, document, thinking... are refused by the converter)."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class AnthropicMessage(Strict):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class AnthropicTool(Loose):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    type: str | None = None


class MessagesRequest(EveryApiExtras):
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    system: str | list[ContentBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    thinking: dict[str, Any] | None = None
    # Structured outputs: {"format": {"type": "json_schema", "schema": ...}, "effort": ...}; the
    # beta's earlier top-level name for the format is ``output_format``.
    output_config: dict[str, Any] | None = None
    output_format: dict[str, Any] | None = None
    container: Any | None = None
    mcp_servers: list[Any] | None = None


class CountTokensRequest(Strict):
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
