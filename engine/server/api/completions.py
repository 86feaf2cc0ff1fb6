"""OpenAI (legacy) Completions: raw prompts in, text choices out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from engine.server.api import structured
from engine.server.api.common import OpenAIChunks, TokenText, openai_answer
from engine.server.api.sampling import openai_params, refuse_unsupported_openai, resolve_max_tokens
from engine.server.conversation import ChoiceResult, TokenLogprob, Usage
from engine.server.errors import as_api_error, bad_request, openai_body, unsupported
from engine.server.generation import ChoiceEvent, count_usage
from engine.server.protocol.openai import CompletionRequest
from engine.server.sse import DONE, data_event


def prompt_ids(req: CompletionRequest, tokenizer: Any) -> list[int]:
    """The one prompt as token ids (a batch of several prompts is refused by name)."""
    prompt = req.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise unsupported("prompt", "send one prompt per request (batched prompts are not supported)")
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise bad_request("prompt must not be empty.", param="prompt")
        return list(tokenizer.encode(prompt, add_special_tokens=True))
    if not prompt:
        raise bad_request("prompt must not be empty.", param="prompt")
    return list(prompt)


def sampling(req: CompletionRequest, prompt_len: int, max_model_len: int) -> list[Any]:
    refuse_unsupported_openai(req)
    if req.echo:
        raise unsupported("echo")
    if req.suffix is not None:
        raise unsupported("suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise unsupported("best_of", "best_of must equal n")
    max_tokens = resolve_max_tokens(
        max_model_len, prompt_len, req.max_tokens if req.max_tokens is not None else 16, "prompt"
    )
    return openai_params(req, max_tokens, req.logprobs)


def completion_logprobs(logprobs: list[TokenLogprob], token_text: TokenText, top_n: int, offset: int) -> dict:
    tokens, token_logprobs, top, offsets = [], [], [], []
    for lp in logprobs:
        text = token_text(lp.token_id)
        tokens.append(text)
        token_logprobs.append(lp.logprob)
        top.append({token_text(t): v for t, v in lp.top[:top_n]})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


def build_response(
    req: CompletionRequest, model: str, choices: list[ChoiceResult], usage: Usage, token_text: TokenText
) -> dict[str, Any]:
    choices_json = [
        {
            "index": c.index,
            "text": c.text,
            "logprobs": None
            if req.logprobs is None
            else completion_logprobs(c.logprobs, token_text, req.logprobs, 0),
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
        }
        for c in choices
    ]
    return openai_answer("cmpl-", "text_completion", model, choices_json, usage)


async def stream_response(
    req: CompletionRequest, model: str, events: AsyncIterator[ChoiceEvent], token_text: TokenText
) -> AsyncIterator[str]:
    """The chunks of a streamed answer; the first one holds generated text (or logprobs, or the end),
    never an empty placeholder, because clients time the first token at the first chunk."""
    chunks = OpenAIChunks(req, "cmpl-", "text_completion", model)
    usage = Usage()
    offsets = [0] * req.n
    try:
        async for event in events:
            count_usage(usage, event)
            if not (event.content or event.finished or event.logprobs):
                continue
            logprobs = None
            if req.logprobs is not None:
                logprobs = completion_logprobs(event.logprobs, token_text, req.logprobs, offsets[event.index])
            offsets[event.index] += len(event.content)
            choice = {
                "index": event.index,
                "text": event.content,
                "logprobs": logprobs,
                "finish_reason": event.finish_reason if event.finished else None,
                "stop_reason": event.stop_reason if event.finished else None,
            }
            yield chunks.chunk(choice, usage)
        if chunks.include_usage:
            yield chunks.usage_chunk(usage)
    except Exception as exc:  # headers are gone: report in-band, as OpenAI does
        yield data_event(openai_body(as_api_error(exc)))
    yield DONE


def output_spec(req: CompletionRequest):
    """What the completion must match, from ``response_format`` or vLLM's extras."""
    spec = structured.response_format(req.response_format, "response_format")
    extra = structured.vllm_extras(req)
    if spec is not None and extra is not None:
        raise bad_request("response_format and a structured_outputs constraint exclude each other.")
    return spec or extra
