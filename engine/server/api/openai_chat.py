"""OpenAI Chat Completions: request -> Conversation, engine choices -> response or SSE chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from engine.server.api import structured
from engine.server.api.common import OpenAIChunks, TokenText, openai_answer
from engine.server.api.sampling import openai_params, refuse_unsupported_openai, resolve_max_tokens
from engine.server.conversation import ChoiceResult, Conversation, Message, TokenLogprob, ToolSpec, Usage
from engine.server.errors import as_api_error, bad_request, openai_body, unsupported
from engine.server.generation import ChoiceEvent, count_usage
from engine.server.protocol.openai import ChatCompletionRequest, ChatMessage
from engine.server.sse import DONE, data_event
from engine.server.tool_parsers import ToolCall


def _text(message: ChatMessage, index: int) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    parts = []
    for j, part in enumerate(message.content):
        if part.type not in ("text", "input_text") or part.text is None:
            raise unsupported(f"messages[{index}].content[{j}].type", f"content of type '{part.type}'")
        parts.append(part.text)
    return "".join(parts)


def to_conversation(req: ChatCompletionRequest) -> tuple[Conversation, bool]:
    """The conversation, and whether tool calls should be parsed from the reply."""
    for name in (
        "audio",
        "prediction",
        "web_search_options",
        "functions",
        "function_call",
    ):
        if getattr(req, name) is not None:
            raise unsupported(name)
    if req.modalities not in (None, ["text"]):
        raise unsupported("modalities", "only ['text']")
    messages = []
    for i, m in enumerate(req.messages):
        role = "system" if m.role == "developer" else m.role
        if role == "tool" and not m.tool_call_id:
            raise bad_request(
                f"messages[{i}]: a tool message needs tool_call_id.", param=f"messages[{i}].tool_call_id"
            )
        calls = [ToolCall(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
        messages.append(
            Message(
                role=role, content=_text(m, i), tool_calls=calls, tool_call_id=m.tool_call_id, name=m.name
            )
        )
    tools = [
        ToolSpec(
            t.function.name,
            t.function.description or "",
            t.function.parameters or {"type": "object"},
            bool(t.function.strict),
        )
        for t in (req.tools or [])
    ]
    mode, name = _tool_choice(req.tool_choice, tools)
    use_tools = bool(req.tools) and mode != "none"
    conversation = Conversation(
        messages=messages,
        tools=tools if use_tools else [],
        template_kwargs=_template_kwargs(req),
        tool_choice=mode,
        forced_tool=name,
        parallel_tool_calls=req.parallel_tool_calls is not False,
    )
    return conversation, use_tools


def _tool_choice(choice: str | dict[str, Any] | None, tools: list[ToolSpec]) -> tuple[str, str | None]:
    if choice is None or choice in ("auto", "none", "required"):
        return structured.tool_choice(choice or "auto", None, tools)
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return structured.tool_choice("named", name, tools)
    raise bad_request(
        "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}.",
        param="tool_choice",
    )


def output_spec(req: ChatCompletionRequest):
    """What the reply must match, from ``response_format`` or vLLM's extras (tools aside)."""
    spec = structured.response_format(req.response_format, "response_format")
    extra = structured.vllm_extras(req)
    if spec is not None and extra is not None:
        raise bad_request("response_format and a structured_outputs constraint exclude each other.")
    return spec or extra


# Arguments of the template render itself, or variables the server sets: not the client's to set.
_RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "messages",
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "sanitize_control_tokens",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


def _template_kwargs(req: ChatCompletionRequest) -> dict[str, Any]:
    kwargs = dict(req.chat_template_kwargs or {})
    for name in kwargs:
        if name in _RESERVED_TEMPLATE_KWARGS:
            raise unsupported(f"chat_template_kwargs.{name}", "the server sets it")
    return kwargs


def sampling(req: ChatCompletionRequest, prompt_len: int, max_model_len: int) -> list[Any]:
    refuse_unsupported_openai(req)
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs to be true.", param="top_logprobs")
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    max_tokens = resolve_max_tokens(max_model_len, prompt_len, requested, "messages")
    return openai_params(req, max_tokens, (req.top_logprobs or 0) if req.logprobs else None)


def logprobs_content(logprobs: list[TokenLogprob], token_text: TokenText, top_n: int) -> list[dict[str, Any]]:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return [
        {**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top[:top_n]]}
        for lp in logprobs
    ]


def tool_call_json(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if index is not None:
        out["index"] = index
    return out


def finish_reason(reason: str | None, has_tool_calls: bool) -> str | None:
    if has_tool_calls and reason == "stop":
        return "tool_calls"
    return reason


def build_response(
    req: ChatCompletionRequest, model: str, choices: list[ChoiceResult], usage: Usage, token_text: TokenText
) -> dict[str, Any]:
    out_choices = []
    for choice in choices:
        content: str | None = choice.text
        if choice.tool_calls and not choice.text.strip():
            content = None
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if choice.reasoning:
            message["reasoning_content"] = choice.reasoning
        if choice.tool_calls:
            message["tool_calls"] = [tool_call_json(c) for c in choice.tool_calls]
        logprobs = None
        if req.logprobs:
            logprobs = {"content": logprobs_content(choice.logprobs, token_text, req.top_logprobs or 0)}
        out_choices.append(
            {
                "index": choice.index,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish_reason(choice.finish_reason, bool(choice.tool_calls)),
                "stop_reason": choice.stop_reason,
            }
        )
    return openai_answer("chatcmpl-", "chat.completion", model, out_choices, usage)


async def stream_response(
    req: ChatCompletionRequest, model: str, events: AsyncIterator[ChoiceEvent], token_text: TokenText
) -> AsyncIterator[str]:
    """The chunks of a streamed answer. Nothing is sent before a choice has something to say: the
    role rides on its first chunk, which holds generated text (or a tool call, logprobs, the end),
    because clients time the first token at the first chunk. A first token that decodes to nothing
    (a skipped special token) sends no chunk either; the role waits for the next one."""
    chunks = OpenAIChunks(req, "chatcmpl-", "chat.completion.chunk", model)
    usage = Usage()
    tool_counts = [0] * req.n
    started = [False] * req.n
    try:
        async for event in events:
            count_usage(usage, event)
            delta: dict[str, Any] = {}
            if event.reasoning:
                delta["reasoning_content"] = event.reasoning
            if event.content:
                delta["content"] = event.content
            if event.tool_calls:
                delta["tool_calls"] = [
                    tool_call_json(call, tool_counts[event.index] + k)
                    for k, call in enumerate(event.tool_calls)
                ]
                tool_counts[event.index] += len(event.tool_calls)
            logprobs = None
            if req.logprobs and event.logprobs:
                logprobs = {"content": logprobs_content(event.logprobs, token_text, req.top_logprobs or 0)}
            finish = (
                finish_reason(event.finish_reason, tool_counts[event.index] > 0) if event.finished else None
            )
            if not (delta or logprobs or finish):
                continue
            if not started[event.index]:
                started[event.index] = True
                delta = {"role": "assistant", "content": None if event.tool_calls else "", **delta}
            choice = {"index": event.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            yield chunks.chunk(choice, usage)
        if chunks.include_usage:
            yield chunks.usage_chunk(usage)
    except Exception as exc:  # headers are gone: report in-band, as OpenAI does
        yield data_event(openai_body(as_api_error(exc)))
    yield DONE


def thinking_request(req: ChatCompletionRequest) -> tuple[bool | None, str]:
    """``reasoning_effort``: "none" turns thinking off, any other effort on; unset: the default."""
    effort = req.reasoning_effort
    return (None if effort is None else effort != "none"), "reasoning_effort"
