"""Anthropic Messages: request -> Conversation, engine choice -> message or event stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from engine.server.api import structured
from engine.server.api.common import new_id, part_text
from engine.server.api.sampling import build_params, request_seed, resolve_max_tokens
from engine.server.conversation import ChoiceResult, Conversation, Message, ToolSpec, Usage
from engine.server.errors import anthropic_body, as_api_error, bad_request, unsupported
from engine.server.generation import ChoiceEvent, count_usage
from engine.server.protocol.anthropic import ContentBlock, CountTokensRequest, MessagesRequest
from engine.server.sse import named_event
from engine.server.tool_parsers import ToolCall


def _block_text(block: ContentBlock, where: str) -> str:
    if block.type != "text" or block.text is None:
        raise unsupported(f"{where}.type", f"content block of type '{block.type}' here")
    return block.text


def _tool_result_text(block: ContentBlock, where: str) -> str:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    texts = []
    for k, part in enumerate(block.content):
        if part.get("type") != "text":
            raise unsupported(
                f"{where}.content[{k}].type", f"tool_result content of type '{part.get('type')}'"
            )
        texts.append(part_text(part, f"{where}.content[{k}]"))
    return "".join(texts)


def to_conversation(req: MessagesRequest | CountTokensRequest) -> tuple[Conversation, bool]:
    for name in ("container", "mcp_servers"):
        if getattr(req, name, None) is not None:
            raise unsupported(name)
    messages: list[Message] = []
    if req.system:
        system = (
            req.system
            if isinstance(req.system, str)
            else "".join(_block_text(b, f"system[{k}]") for k, b in enumerate(req.system))
        )
        messages.append(Message(role="system", content=system))
    tool_names: dict[str, str] = {}
    for i, m in enumerate(req.messages):
        if isinstance(m.content, str):
            messages.append(Message(role=m.role, content=m.content))
            continue
        text, calls = [], []
        for j, block in enumerate(m.content):
            where = f"messages[{i}].content[{j}]"
            if block.type == "tool_use" and m.role == "assistant":
                if not block.id or not block.name:
                    raise bad_request(f"{where}: tool_use needs id and name.", param=where)
                calls.append(
                    ToolCall(block.id, block.name, json.dumps(block.input or {}, ensure_ascii=False))
                )
                tool_names[block.id] = block.name
            elif block.type == "tool_result" and m.role == "user":
                if not block.tool_use_id:
                    raise bad_request(f"{where}: tool_result needs tool_use_id.", param=where)
                result = _tool_result_text(block, where)
                messages.append(
                    Message(
                        role="tool",
                        content=result,
                        tool_call_id=block.tool_use_id,
                        name=tool_names.get(block.tool_use_id),
                    )
                )
            else:
                text.append(_block_text(block, where))
        if text or calls:
            messages.append(Message(role=m.role, content="".join(text), tool_calls=calls))
    tools = []
    for k, tool in enumerate(req.tools or []):
        if tool.type not in (None, "custom"):
            raise unsupported(f"tools[{k}].type", f"server tool '{tool.type}'")
        tools.append(ToolSpec(tool.name, tool.description or "", tool.input_schema, _strict(tool)))
    choice = req.tool_choice or {}
    kind = choice.get("type", "auto")
    modes = {"auto": "auto", "none": "none", "any": "required", "tool": "named"}
    if kind not in modes:
        raise bad_request(
            "tool_choice.type must be 'auto', 'none', 'any' or 'tool'.", param="tool_choice.type"
        )
    mode, name = structured.tool_choice(modes[kind], choice.get("name"), tools)
    use_tools = bool(req.tools) and mode != "none"
    conversation = Conversation(
        messages=messages,
        tools=tools if use_tools else [],
        tool_choice=mode,
        forced_tool=name,
        parallel_tool_calls=not choice.get("disable_parallel_tool_use", False),
    )
    return conversation, use_tools


def _strict(tool: Any) -> bool:
    return bool((tool.model_extra or {}).get("strict"))


def output_spec(req: MessagesRequest):
    """Anthropic's structured outputs (``output_config.format``, or the beta's ``output_format``:
    a JSON schema the text must match) or vLLM's extras (tools aside); one at most."""
    fmt, param = _output_format(req)
    extras = structured.vllm_extras(req)
    if fmt is None:
        return extras
    if extras is not None:
        raise bad_request(f"{param} and vLLM's structured output extras cannot be combined.", param=param)
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise bad_request(f"{param}.type must be 'json_schema'.", param=f"{param}.type")
    return structured.response_format(fmt, param, nested=False)


def _output_format(req: MessagesRequest) -> tuple[Any, str]:
    if req.output_config is not None and req.output_config.get("format") is not None:
        if req.output_format is not None:
            raise bad_request("Give output_config.format or output_format, not both.", param="output_format")
        return req.output_config["format"], "output_config.format"
    return req.output_format, "output_format"


def sampling(req: MessagesRequest, prompt_len: int, max_model_len: int) -> list[Any]:
    max_tokens = resolve_max_tokens(max_model_len, prompt_len, req.max_tokens, "messages")
    if any(not s for s in req.stop_sequences or []):
        raise bad_request("stop_sequences must be non-empty strings.", param="stop_sequences")
    return build_params(
        1,
        request_seed(req),
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k or None,
        stop=list(req.stop_sequences or []),
    )


def stop_reason(
    choice_finish: str | None, stop: str | int | None, has_tool_calls: bool
) -> tuple[str, str | None]:
    if has_tool_calls:
        return "tool_use", None
    if choice_finish == "length":
        return "max_tokens", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    return "end_turn", None


def tool_use_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def build_response(model: str, choice: ChoiceResult, usage: Usage) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if choice.reasoning:
        content.append({"type": "thinking", "thinking": choice.reasoning, "signature": ""})
    if choice.text and (choice.text.strip() or not choice.tool_calls):
        content.append({"type": "text", "text": choice.text})
    for call in choice.tool_calls:
        content.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call.id),
                "name": call.name,
                "input": json.loads(call.arguments),
            }
        )
    reason, sequence = stop_reason(choice.finish_reason, choice.stop_reason, bool(choice.tool_calls))
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage(usage),
    }


async def stream_response(model: str, events: AsyncIterator[ChoiceEvent]) -> AsyncIterator[str]:
    """The events of a streamed message, sent together per engine output. ``message_start`` waits for
    the first content (text, a tool call or the end) and leaves in the same write as it, because
    clients time the first token at the first event. Leading whitespace and text that decodes to
    nothing are not content yet."""
    usage = Usage()
    block = -1  # index of the last content block opened
    text_open = False
    thinking_open = False
    pending_space = ""  # whitespace before any text block: dropped if a tool_use block follows
    saw_tool = False
    started = False
    try:
        async for event in events:
            count_usage(usage, event)
            out: list[str] = []
            if event.reasoning:
                if not thinking_open:
                    block += 1
                    thinking_open = True
                    start = {"type": "thinking", "thinking": "", "signature": ""}
                    out.append(
                        named_event({"type": "content_block_start", "index": block, "content_block": start})
                    )
                delta = {"type": "thinking_delta", "thinking": event.reasoning}
                out.append(named_event({"type": "content_block_delta", "index": block, "delta": delta}))
            if thinking_open and (event.content.strip() or event.tool_calls or event.finished):
                thinking_open = False
                out.append(named_event({"type": "content_block_stop", "index": block}))
            text = pending_space + event.content
            pending_space = ""
            if text and not text_open and not text.strip():
                pending_space, text = text, ""
            if text:
                if not text_open:
                    block += 1
                    text_open = True
                    start = {"type": "text", "text": ""}
                    out.append(
                        named_event({"type": "content_block_start", "index": block, "content_block": start})
                    )
                delta = {"type": "text_delta", "text": text}
                out.append(named_event({"type": "content_block_delta", "index": block, "delta": delta}))
            for call in event.tool_calls:
                pending_space = ""
                if text_open:
                    text_open = False
                    out.append(named_event({"type": "content_block_stop", "index": block}))
                block += 1
                saw_tool = True
                start = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": {}}
                out.append(
                    named_event({"type": "content_block_start", "index": block, "content_block": start})
                )
                delta = {"type": "input_json_delta", "partial_json": call.arguments}
                out.append(named_event({"type": "content_block_delta", "index": block, "delta": delta}))
                out.append(named_event({"type": "content_block_stop", "index": block}))
            if event.finished:
                if text_open:
                    out.append(named_event({"type": "content_block_stop", "index": block}))
                reason, sequence = stop_reason(event.finish_reason, event.stop_reason, saw_tool)
                out.append(
                    named_event(
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": reason, "stop_sequence": sequence},
                            "usage": {"output_tokens": usage.completion_tokens},
                        }
                    )
                )
                out.append(named_event({"type": "message_stop"}))
            if not out:
                continue
            if not started:
                started = True
                out.insert(0, _message_start(model, usage))
            yield "".join(out)
    except Exception as exc:  # headers are gone: report in-band, as Anthropic does
        yield named_event(anthropic_body(as_api_error(exc)))


def _message_start(model: str, usage: Usage) -> str:
    """The opening event: the message so far, with the prompt's usage and no output yet."""
    message = {**build_response(model, ChoiceResult(index=0), usage), "content": [], "stop_reason": None}
    message["usage"]["output_tokens"] = 0
    return named_event({"type": "message_start", "message": message})


def thinking_request(req: MessagesRequest) -> tuple[bool | None, str]:
    """``thinking``: {"type": "enabled", "budget_tokens": ...} or {"type": "disabled"}."""
    if req.thinking is None:
        return None, "thinking"
    kind = req.thinking.get("type")
    if kind not in ("enabled", "disabled"):
        raise bad_request("thinking.type must be 'enabled' or 'disabled'.", param="thinking.type")
    return kind == "enabled", "thinking"


def thinking_budget(req: MessagesRequest) -> int | None:
    """``thinking.budget_tokens`` of enabled thinking: an integer >= 1 and below ``max_tokens``, as
    Anthropic asks (its minimum of 1024 is not imposed, so small local models can use small budgets)."""
    if req.thinking is None or req.thinking.get("type") != "enabled":
        return None
    budget, param = req.thinking.get("budget_tokens"), "thinking.budget_tokens"
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise bad_request(f"{param} must be an integer >= 1, got {budget!r}.", param=param)
    if budget >= req.max_tokens:
        raise bad_request(f"{param} ({budget}) must be less than max_tokens ({req.max_tokens}).", param=param)
    return budget
