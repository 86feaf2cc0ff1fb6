"""The one conversation representation that every API converts into and the chat template renders.

OpenAI Chat, Anthropic Messages and OpenAI Responses requests all become a ``Conversation``; the
tokenizer's chat template renders it (``template_messages`` / ``template_tools`` give the Hugging
Face shapes). Generated choices come back as ``ChoiceResult`` and each API converts them out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.server.tool_parsers import ToolCall

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class Message:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # on role "tool": the call this result answers
    name: str | None = None  # on role "tool": the function's name, when the API gives it


@dataclass
class ToolSpec:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False  # its calls' arguments are guaranteed to validate against ``parameters``


@dataclass
class Conversation:
    messages: list[Message] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # extra chat template variables
    tool_choice: str = "auto"  # "auto" | "none" | "required" | "named"
    forced_tool: str | None = None  # tool_choice "named": the tool to call
    parallel_tool_calls: bool = True

    def encode(self, tokenizer: Any, add_generation_prompt: bool = True) -> list[int]:
        """The prompt's token ids: the chat template with the generation prompt (control-token-safe)."""
        return list(
            tokenizer.encode_chat(
                self.template_messages(),
                tools=self.template_tools(),
                add_generation_prompt=add_generation_prompt,
                **self.template_kwargs,
            )
        )

    def template_messages(self) -> list[dict[str, Any]]:
        return [_template_message(m) for m in self.messages]

    def template_tools(self) -> list[dict[str, Any]] | None:
        if not self.tools:
            return None
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in self.tools
        ]


def _template_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                # Templates index into arguments (``tool_call.arguments | tojson``): give them a dict.
                "function": {"name": call.name, "arguments": _loads_object(call.arguments)},
            }
            for call in message.tool_calls
        ]
    if message.role == "tool":
        if message.tool_call_id:
            out["tool_call_id"] = message.tool_call_id
        if message.name:
            out["name"] = message.name
    return out


def _loads_object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass
class ChoiceResult:
    """One finished choice, API-neutral."""

    index: int
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: str | int | None = None  # the stop string or token id that ended it, if any
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    reasoning: str = ""  # the model's reasoning, apart from ``text``
    reasoning_tokens: int = 0


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
