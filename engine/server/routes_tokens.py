"""vLLM's tokenizer routes: /tokenize and /detokenize with the replica's own tokenizer and template."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from engine.clients.protocol import EngineClient
from engine.server.api import openai_chat
from engine.server.api.common import check_model
from engine.server.errors import bad_request, unsupported
from engine.server.http import parse_body, require_api_key, server_state
from engine.server.protocol.openai import ChatCompletionRequest
from engine.server.protocol.tokenize import DetokenizeRequest, TokenizeRequest
from engine.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


def _serving(request: Request, model: str | None) -> tuple[ServerState, EngineClient]:
    state = server_state(request)
    if model is not None:
        check_model(model, state.settings.served_model_names)
    return state, state.admit()


@router.post("/tokenize")
async def tokenize(request: Request) -> dict:
    req = await parse_body(request, TokenizeRequest)
    state, engine = _serving(request, req.model)
    if (req.prompt is None) == (req.messages is None):
        raise bad_request("Give exactly one of 'prompt' and 'messages'.", param="prompt")
    if req.messages is None:
        tokens = engine.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens is not False)
    else:
        if req.add_special_tokens:
            raise unsupported(
                "add_special_tokens", "with 'messages' the chat template writes the special tokens"
            )
        chat = ChatCompletionRequest(
            model=req.model or state.model_name,
            messages=req.messages,
            tools=req.tools,
            chat_template_kwargs=req.chat_template_kwargs,
        )
        conversation, _ = openai_chat.to_conversation(chat)
        tokens = state.render(conversation, "messages", add_generation_prompt=req.add_generation_prompt)
    body = {"count": len(tokens), "max_model_len": engine.max_model_len, "tokens": tokens, "token_strs": None}
    if req.return_token_strs:
        body["token_strs"] = engine.tokenizer.hf.convert_ids_to_tokens(tokens)
    return body


@router.post("/detokenize")
async def detokenize(request: Request) -> dict:
    req = await parse_body(request, DetokenizeRequest)
    _, engine = _serving(request, req.model)
    vocab_size = engine.tokenizer.vocab_size
    for i, token in enumerate(req.tokens):
        if not 0 <= token < vocab_size:
            raise bad_request(
                f"tokens[{i}] = {token} is outside the vocabulary [0, {vocab_size}).", param=f"tokens[{i}]"
            )
    return {"prompt": engine.tokenizer.decode(req.tokens, skip_special_tokens=False)}
