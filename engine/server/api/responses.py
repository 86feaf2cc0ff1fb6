"""OpenAI Responses: items -> Conversation (with stored history), choice -> response or events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from engine.server.api import structured
from engine.server.api.common import new_id, now, part_text
from engine.server.api.response_store import ResponseStore, StoredResponse
from engine.server.api.sampling import build_params, request_seed, resolve_max_tokens
from engine.server.conversation import ChoiceResult, Conversation, Message, ToolSpec, Usage
from engine.server.errors import APIError, as_api_error, bad_request, openai_body, unsupported
from engine.server.generation import ChoiceEvent, count_usage
from engine.server.protocol.responses import InputItem, ResponsesRequest
from engine.server.sse import named_event
from engine.server.tool_parsers import ToolCall

_TEXT_PARTS = ("input_text", "output_text", "text")


def _refuse_unsupported(req: ResponsesRequest) -> None:
    for name in ("include", "prompt", "conversation", "max_tool_calls", "top_logprobs"):
        if getattr(req, name):
            raise unsupported(name)
    if req.background:
        raise unsupported("background")
    for key in req.reasoning or {}:
        if key not in ("effort", "summary", "generate_summary") and req.reasoning[key] is not None:
            raise unsupported(f"reasoning.{key}")
    if req.truncation not in (None, "disabled"):
        raise unsupported("truncation", "only 'disabled'")


def _content_text(content: str | list[dict[str, Any]] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for k, part in enumerate(content):
        if part.get("type") not in _TEXT_PARTS:
            raise unsupported(f"{where}.content[{k}].type", f"content of type '{part.get('type')}'")
        texts.append(part_text(part, f"{where}.content[{k}]"))
    return "".join(texts)


def _items_to_messages(items: list[InputItem]) -> list[Message]:
    messages: list[Message] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.type or "message"
        if kind == "message":
            role = {"developer": "system"}.get(item.role or "", item.role)
            if role not in ("system", "user", "assistant"):
                raise bad_request(
                    f"{where}.role must be user, assistant, system or developer.", param=f"{where}.role"
                )
            messages.append(Message(role=role, content=_content_text(item.content, where)))
        elif kind == "function_call":
            if not (item.call_id and item.name):
                raise bad_request(f"{where}: function_call needs call_id and name.", param=where)
            call = ToolCall(item.call_id, item.name, item.arguments or "{}")
            if messages and messages[-1].role == "assistant":
                messages[-1].tool_calls.append(call)
            else:
                messages.append(Message(role="assistant", tool_calls=[call]))
        elif kind == "function_call_output":
            if not item.call_id:
                raise bad_request(f"{where}: function_call_output needs call_id.", param=f"{where}.call_id")
            messages.append(
                Message(role="tool", content=_content_text(item.output, where), tool_call_id=item.call_id)
            )
        else:
            raise unsupported(f"{where}.type", f"input item of type '{kind}'")
    return messages


def to_conversation(req: ResponsesRequest, store: ResponseStore) -> tuple[Conversation, list[Message], bool]:
    """The conversation to render, the history to store (no instructions), and whether tools apply."""
    _refuse_unsupported(req)
    history: list[Message] = []
    if req.previous_response_id:
        previous = store.get(req.previous_response_id)
        if previous is None:
            raise APIError(
                404, f"Response with id '{req.previous_response_id}' not found.", param="previous_response_id"
            )
        history = list(previous.history)
    if isinstance(req.input, str):
        history.append(Message(role="user", content=req.input))
    else:
        history.extend(_items_to_messages(req.input))
    tools = []
    for k, tool in enumerate(req.tools or []):
        if tool.type != "function" or not tool.name:
            raise unsupported(f"tools[{k}].type", f"tool of type '{tool.type}' (only named functions)")
        tools.append(
            ToolSpec(
                tool.name, tool.description or "", tool.parameters or {"type": "object"}, bool(tool.strict)
            )
        )
    mode, name = _tool_choice(req.tool_choice, tools)
    use_tools = bool(tools) and mode != "none"
    messages = ([Message(role="system", content=req.instructions)] if req.instructions else []) + history
    conversation = Conversation(
        messages=messages,
        tools=tools if use_tools else [],
        tool_choice=mode,
        forced_tool=name,
        parallel_tool_calls=req.parallel_tool_calls is not False,
    )
    return conversation, history, use_tools


def _tool_choice(choice: str | dict[str, Any] | None, tools: list[ToolSpec]) -> tuple[str, str | None]:
    if choice is None or choice in ("auto", "none", "required"):
        return structured.tool_choice(choice or "auto", None, tools)
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return structured.tool_choice("named", choice["name"], tools)
    raise bad_request(
        "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}.",
        param="tool_choice",
    )


def output_spec(req: ResponsesRequest):
    """What the reply must match, from ``text.format`` or vLLM's extras (tools aside)."""
    spec = structured.response_format((req.text or {}).get("format"), "text.format", nested=False)
    extra = structured.vllm_extras(req)
    if spec is not None and extra is not None:
        raise bad_request("text.format and a structured_outputs constraint exclude each other.")
    return spec or extra


def sampling(req: ResponsesRequest, prompt_len: int, max_model_len: int) -> list[Any]:
    max_tokens = resolve_max_tokens(max_model_len, prompt_len, req.max_output_tokens, "input")
    return build_params(
        1, request_seed(req), max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p
    )


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else []
    )
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if status == "completed" else []
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def _call_item(call: ToolCall, status: str = "completed", arguments: str | None = None) -> dict[str, Any]:
    return {
        "id": "fc_" + call.id.removeprefix("call_"),
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if arguments is None else arguments,
    }


class ResponseBuilder:
    """The response object of one call, shared by the streaming and the non-streaming path."""

    def __init__(self, req: ResponsesRequest, model: str):
        self.req = req
        self.model = model
        self.id = new_id("resp_")
        self.created_at = now()

    def body(
        self, status: str, output: list[dict[str, Any]], usage: Usage | None, incomplete: bool = False
    ) -> dict[str, Any]:
        req = self.req
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": output,
            "usage": None if usage is None else _usage(usage),
            "instructions": req.instructions,
            "previous_response_id": req.previous_response_id,
            "tools": [t.model_dump(exclude_none=True) for t in req.tools or []],
            "tool_choice": req.tool_choice or "auto",
            "parallel_tool_calls": req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "max_output_tokens": req.max_output_tokens,
            "metadata": req.metadata or {},
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "store": req.store,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        }

    def final(self, choice: ChoiceResult, usage: Usage) -> dict[str, Any]:
        output = []
        if choice.reasoning:
            output.append(_reasoning_item(new_id("rs_"), choice.reasoning, "completed"))
        if choice.text.strip() or not choice.tool_calls:
            output.append(_message_item(new_id("msg_"), choice.text, "completed"))
        output.extend(_call_item(call) for call in choice.tool_calls)
        incomplete = choice.finish_reason == "length"
        return self.body("incomplete" if incomplete else "completed", output, usage, incomplete)

    def remember(
        self, store: ResponseStore, history: list[Message], choice: ChoiceResult, body: dict[str, Any]
    ) -> None:
        if not self.req.store:
            return
        reply = Message(role="assistant", content=choice.text, tool_calls=list(choice.tool_calls))
        store.put(self.id, StoredResponse(body=body, history=[*history, reply]))

    async def stream(
        self, events: AsyncIterator[ChoiceEvent], store: ResponseStore, history: list[Message]
    ) -> AsyncIterator[str]:
        """The events of a streamed response, sent together per engine output. ``response.created``
        and ``response.in_progress`` wait for the first content (text, a tool call or the end) and
        leave in the same write as it, because clients time the first token at the first event.
        Leading whitespace and text that decodes to nothing are not content yet."""
        seq = 0
        usage = Usage()
        choice = ChoiceResult(index=0)
        output: list[dict[str, Any]] = []
        text_item: dict[str, Any] | None = None
        item_text = ""  # text of the open message item
        reasoning_item: dict[str, Any] | None = None
        reasoning_text = ""
        pending_space = ""  # whitespace not yet sent: dropped if a tool call follows it

        def event(payload: dict[str, Any]) -> str:
            nonlocal seq
            seq += 1
            return named_event({**payload, "sequence_number": seq - 1})

        def close_text() -> list[str]:
            nonlocal text_item, item_text
            if text_item is None:
                return []
            done = _message_item(text_item["id"], item_text, "completed")
            where = {"item_id": done["id"], "output_index": len(output), "content_index": 0}
            out = [
                event({"type": "response.output_text.done", **where, "text": item_text, "logprobs": []}),
                event({"type": "response.content_part.done", **where, "part": done["content"][0]}),
                event({"type": "response.output_item.done", "output_index": len(output), "item": done}),
            ]
            output.append(done)
            text_item, item_text = None, ""
            return out

        def close_reasoning() -> list[str]:
            nonlocal reasoning_item, reasoning_text
            if reasoning_item is None:
                return []
            done = _reasoning_item(reasoning_item["id"], reasoning_text, "completed")
            where = {"item_id": done["id"], "output_index": len(output), "content_index": 0}
            out = [
                event({"type": "response.reasoning_text.done", **where, "text": reasoning_text}),
                event({"type": "response.output_item.done", "output_index": len(output), "item": done}),
            ]
            output.append(done)
            reasoning_item, reasoning_text = None, ""
            return out

        # Numbered first, sent with the first content.
        head = [
            event({"type": "response.created", "response": self.body("in_progress", [], None)}),
            event({"type": "response.in_progress", "response": self.body("in_progress", [], None)}),
        ]

        def flush(out: list[str]) -> str:
            nonlocal head
            joined = "".join(head + out)
            head = []
            return joined

        try:
            async for ev in events:
                count_usage(usage, ev)
                choice.text += ev.content
                choice.reasoning += ev.reasoning
                out: list[str] = []
                if ev.reasoning:
                    if reasoning_item is None:
                        reasoning_item = _reasoning_item(new_id("rs_"), "", "in_progress")
                        out.append(
                            event(
                                {
                                    "type": "response.output_item.added",
                                    "output_index": len(output),
                                    "item": reasoning_item,
                                }
                            )
                        )
                    reasoning_text += ev.reasoning
                    where = {"item_id": reasoning_item["id"], "output_index": len(output), "content_index": 0}
                    out.append(
                        event({"type": "response.reasoning_text.delta", **where, "delta": ev.reasoning})
                    )
                if reasoning_item is not None and (ev.content.strip() or ev.tool_calls or ev.finished):
                    out.extend(close_reasoning())
                text = pending_space + ev.content
                pending_space = ""
                if text and text_item is None and not text.strip():
                    pending_space, text = text, ""
                if text:
                    if text_item is None:
                        text_item = _message_item(new_id("msg_"), "", "in_progress")
                        where = {"item_id": text_item["id"], "output_index": len(output)}
                        out.append(
                            event(
                                {
                                    "type": "response.output_item.added",
                                    "output_index": len(output),
                                    "item": text_item,
                                }
                            )
                        )
                        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                        out.append(
                            event(
                                {
                                    "type": "response.content_part.added",
                                    **where,
                                    "content_index": 0,
                                    "part": part,
                                }
                            )
                        )
                    item_text += text
                    where = {"item_id": text_item["id"], "output_index": len(output), "content_index": 0}
                    out.append(
                        event({"type": "response.output_text.delta", **where, "delta": text, "logprobs": []})
                    )
                for call in ev.tool_calls:
                    pending_space = ""
                    out.extend(close_text())
                    choice.tool_calls.append(call)
                    item = _call_item(call, "in_progress", arguments="")
                    where = {"item_id": item["id"], "output_index": len(output)}
                    out.append(
                        event(
                            {"type": "response.output_item.added", "output_index": len(output), "item": item}
                        )
                    )
                    out.append(
                        event(
                            {
                                "type": "response.function_call_arguments.delta",
                                **where,
                                "delta": call.arguments,
                            }
                        )
                    )
                    out.append(
                        event(
                            {
                                "type": "response.function_call_arguments.done",
                                **where,
                                "arguments": call.arguments,
                                "name": call.name,
                            }
                        )
                    )
                    done = _call_item(call)
                    out.append(
                        event(
                            {"type": "response.output_item.done", "output_index": len(output), "item": done}
                        )
                    )
                    output.append(done)
                if ev.finished:
                    choice.finish_reason, choice.stop_reason = ev.finish_reason, ev.stop_reason
                if out:
                    yield flush(out)
            out = close_text()
            if not output:  # nothing generated: still a (empty) message, as the non-streaming path gives
                output.append(_message_item(new_id("msg_"), "", "completed"))
            incomplete = choice.finish_reason == "length"
            body = self.body("incomplete" if incomplete else "completed", output, usage, incomplete)
            self.remember(store, history, choice, body)
            kind = "response.incomplete" if incomplete else "response.completed"
            out.append(event({"type": kind, "response": body}))
            yield flush(out)
        except Exception as exc:  # headers are gone: report in-band
            err = openai_body(as_api_error(exc))["error"]
            yield flush(
                [
                    event(
                        {
                            "type": "error",
                            "code": err["code"],
                            "message": err["message"],
                            "param": err["param"],
                        }
                    )
                ]
            )


def thinking_request(req: ResponsesRequest) -> tuple[bool | None, str]:
    """``reasoning.effort``: "none" turns thinking off, any other effort on; unset: the default."""
    effort = (req.reasoning or {}).get("effort")
    return (None if effort is None else effort != "none"), "reasoning.effort"
