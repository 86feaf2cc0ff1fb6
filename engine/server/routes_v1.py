"""The /v1 API routes: OpenAI Chat, Completions, Models, Responses and Anthropic Messages."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from engine.server.api import anthropic_messages, completions, openai_chat, responses
from engine.server.api.common import check_model, new_id, now
from engine.server.errors import APIError
from engine.server.generation import collect, generate_choices
from engine.server.http import parse_body, require_api_key, server_state, sse, unless_disconnected
from engine.server.protocol.anthropic import CountTokensRequest, MessagesRequest
from engine.server.protocol.openai import ChatCompletionRequest, CompletionRequest
from engine.server.protocol.responses import ResponsesRequest

router = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])


@router.get("/models")
async def list_models(request: Request) -> dict:
    state = server_state(request)
    max_len = state.engine.max_model_len if state.ready else None
    data = [
        {
            "id": name,
            "object": "model",
            "created": now(),
            "owned_by": "chassis",
            "root": state.settings.model_dir,
            "max_model_len": max_len,
        }
        for name in state.settings.served_model_names
    ]
    return {"object": "list", "data": data}


@router.post("/chat/completions")
async def chat_completions(request: Request):
    state = server_state(request)
    req = await parse_body(request, ChatCompletionRequest)
    model = check_model(req.model, state.settings.served_model_names)
    engine = state.admit()
    conversation, use_tools = openai_chat.to_conversation(req)
    prompt = state.render(conversation, "messages")
    params = openai_chat.sampling(req, len(prompt), engine.max_model_len)
    parser = state.parser_cls if use_tools else None
    events = generate_choices(engine, prompt, params, new_id("chat-"), state.metrics, parser, req.cache_salt)
    if req.stream:
        return sse(openai_chat.stream_response(req, model, events, state.token_text))
    choices, usage = await unless_disconnected(request, collect(events, req.n))
    return openai_chat.build_response(req, model, choices, usage, state.token_text)


@router.post("/completions")
async def create_completion(request: Request):
    state = server_state(request)
    req = await parse_body(request, CompletionRequest)
    model = check_model(req.model, state.settings.served_model_names)
    engine = state.admit()
    prompt = completions.prompt_ids(req, engine.tokenizer)
    params = completions.sampling(req, len(prompt), engine.max_model_len)
    events = generate_choices(engine, prompt, params, new_id("cmpl-"), state.metrics, None, req.cache_salt)
    if req.stream:
        return sse(completions.stream_response(req, model, events, state.token_text))
    choices, usage = await unless_disconnected(request, collect(events, req.n))
    return completions.build_response(req, model, choices, usage, state.token_text)


@router.post("/messages")
async def create_message(request: Request):
    state = server_state(request)
    req = await parse_body(request, MessagesRequest)
    model = check_model(req.model, state.settings.served_model_names)
    engine = state.admit()
    conversation, use_tools = anthropic_messages.to_conversation(req)
    prompt = state.render(conversation, "messages")
    params = anthropic_messages.sampling(req, len(prompt), engine.max_model_len)
    parser = state.parser_cls if use_tools else None
    events = generate_choices(engine, prompt, params, new_id("msg-"), state.metrics, parser)
    if req.stream:
        return sse(anthropic_messages.stream_response(model, events))
    choices, usage = await unless_disconnected(request, collect(events, 1))
    return anthropic_messages.build_response(model, choices[0], usage)


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
    state = server_state(request)
    req = await parse_body(request, ResponsesRequest)
    model = check_model(req.model, state.settings.served_model_names)
    engine = state.admit()
    conversation, history, use_tools = responses.to_conversation(req, state.responses)
    prompt = state.render(conversation, "input")
    params = responses.sampling(req, len(prompt), engine.max_model_len)
    parser = state.parser_cls if use_tools else None
    events = generate_choices(engine, prompt, params, new_id("resp-"), state.metrics, parser)
    builder = responses.ResponseBuilder(req, model)
    if req.stream:
        return sse(builder.stream(events, state.responses, history))
    choices, usage = await unless_disconnected(request, collect(events, 1))
    body = builder.final(choices[0], usage)
    builder.remember(state.responses, history, choices[0], body)
    return JSONResponse(body)


@router.get("/responses/{response_id}")
async def get_response(request: Request, response_id: str):
    stored = server_state(request).responses.get(response_id)
    if stored is None:
        raise APIError(404, f"Response with id '{response_id}' not found.", param="response_id")
    return stored.body
