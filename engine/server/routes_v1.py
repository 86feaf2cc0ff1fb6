"""The /v1 API routes: OpenAI Chat, Completions, Models, Responses and Anthropic Messages."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Depends, Request

from engine.sampling.params import ThinkingBudget
from engine.server.api import anthropic_messages
from engine.server.api.common import check_model, new_id, now
from engine.server.api.exchanges import (
    ChatExchange,
    CompletionExchange,
    Exchange,
    MessageExchange,
    ResponseExchange,
)
from engine.server.errors import APIError, as_api_error, bad_request
from engine.server.generation import collect, generate_choices
from engine.server.http import ClientGone, parse_body, require_api_key, server_state, sse, unless_disconnected
from engine.server.protocol.anthropic import CountTokensRequest
from engine.server.reasoning import ReasoningParser
from engine.server.reasoning.parser import START as REASONING_START
from engine.server.state import ServerState
from engine.server.tool_parsers.first_call import first_call_only

router = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])


def _model_card(state: ServerState, name: str) -> dict:
    """vLLM's model card: ``root`` is the checkpoint served, ``parent`` a base model's (none here)."""
    return {
        "id": name,
        "object": "model",
        "created": now(),
        "owned_by": "chassis",
        "root": state.settings.model_dir,
        "parent": None,
        "max_model_len": state.engine.max_model_len if state.ready else None,
    }


@router.get("/models")
async def list_models(request: Request) -> dict:
    state = server_state(request)
    return {
        "object": "list",
        "data": [_model_card(state, name) for name in state.settings.served_model_names],
    }


@router.get("/models/{model_id:path}")
async def retrieve_model(request: Request, model_id: str) -> dict:
    state = server_state(request)
    return _model_card(state, check_model(model_id, state.settings.served_model_names))


def thinking_budget(state: ServerState, tokens: int, opens: bool, param: str) -> ThinkingBudget:
    """The engine's budget: ``tokens`` inside the block, counted from the prompt's ``<think>`` or
    from the one the reply opens (Qwen3); a 400 when the end marker is not one token."""
    if not state.reasoning_end_token:
        raise bad_request(
            f"{param}: this model's reasoning end marker {state.reasoning.end_marker!r} is not one token, "
            "so a thinking budget cannot be enforced.",
            param=param,
        )
    return ThinkingBudget(tokens, state.reasoning.end_marker, None if opens else REASONING_START)


async def _generate(request: Request, kind: type[Exchange]):
    """The one path of every generating API: parse, check the model, admit, prompt, generate, then
    stream the answer or collect it whole."""
    state = server_state(request)
    req = await parse_body(request, kind.request_type)
    model = check_model(req.model, state.settings.served_model_names)
    engine = state.admit()
    exchange = kind(req, model, state)
    prompt, use_tools = exchange.prompt(engine)
    params = exchange.sampling(len(prompt), engine.max_model_len)
    spec = exchange.constraint()
    budget_tokens, budget_param = exchange.thinking_budget()
    make_reasoning, budget = None, None
    if exchange.thinks:
        opens = engine.tokenizer.decode(prompt[-16:]).rstrip().endswith(REASONING_START)
        make_reasoning = partial(ReasoningParser, opens)
        if spec is not None and state.reasoning_end_token:
            spec = spec.after_reasoning(state.reasoning.end_marker)
        if budget_tokens is not None:
            budget = thinking_budget(state, budget_tokens, opens, budget_param)
    for p in params:
        p.structured = spec
        p.thinking_budget = budget
    parser = state.parser_cls if use_tools else None
    if parser is not None and not exchange.conversation.parallel_tool_calls:
        parser = first_call_only(parser)
    request_id = new_id(kind.id_prefix)
    try:
        events = await generate_choices(
            engine, prompt, params, request_id, state.metrics, parser, exchange.cache_salt, make_reasoning
        )
        if req.stream:
            return sse(exchange.stream(events))
        choices, usage = await unless_disconnected(request, collect(events, exchange.n))
    except ClientGone:
        raise
    except Exception as exc:
        raise as_api_error(exc) from exc
    return exchange.respond(choices, usage)


@router.post("/chat/completions")
async def chat_completions(request: Request):
    return await _generate(request, ChatExchange)


@router.post("/completions")
async def create_completion(request: Request):
    return await _generate(request, CompletionExchange)


@router.post("/messages")
async def create_message(request: Request):
    return await _generate(request, MessageExchange)


@router.post("/messages/count_tokens")
async def count_tokens(request: Request):
    state = server_state(request)
    req = await parse_body(request, CountTokensRequest)
    check_model(req.model, state.settings.served_model_names)
    state.admit()
    conversation, _ = anthropic_messages.to_conversation(req)
    return {"input_tokens": len(state.render(conversation, "messages"))}


@router.post("/responses")
async def create_response(request: Request):
    return await _generate(request, ResponseExchange)


@router.get("/responses/{response_id}")
async def get_response(request: Request, response_id: str):
    stored = server_state(request).responses.get(response_id)
    if stored is None:
        raise APIError(404, f"Response with id '{response_id}' not found.", param="response_id")
    return stored.body
