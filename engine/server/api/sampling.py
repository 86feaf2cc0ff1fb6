"""Turn API sampling fields into engine SamplingParams, refusing what the engine cannot honour."""

from __future__ import annotations

from typing import Any

from engine.server.errors import bad_request, unsupported


def resolve_max_tokens(max_model_len: int, prompt_len: int, requested: int | None, prompt_param: str) -> int:
    """vLLM's rule: the prompt plus the completion must fit in the context; default fills it."""
    if prompt_len >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt has "
            f"{prompt_len} tokens, which leaves no room for a completion. Please reduce the length of "
            f"the {prompt_param}.",
            param=prompt_param,
        )
    if requested is None:
        return max_model_len - prompt_len
    if prompt_len + requested > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_len + requested} tokens ({prompt_len} in the {prompt_param}, {requested} in the "
            f"completion). Please reduce the length of the {prompt_param} or the completion.",
            param="max_tokens",
        )
    return requested


def stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if any(not s for s in stops):
        raise bad_request("Stop sequences must be non-empty strings.", param="stop")
    return stops


def refuse_unsupported_openai(req: Any) -> None:
    """Parameters the OpenAI APIs define and this server does not implement yet: refused by name."""
    if req.logit_bias:
        raise unsupported("logit_bias")
    if req.stream_options is not None and not req.stream:
        raise bad_request("stream_options is only allowed when stream is true.", param="stream_options")


def request_seed(req: Any) -> int | None:
    """The request's seed: ``seed`` (vLLM, OpenAI) or ``seq_seed`` (DeepSeek); both only if equal."""
    if req.seed is not None and req.seq_seed is not None and req.seed != req.seq_seed:
        raise bad_request("seed and seq_seed are two names for one seed: give one.", param="seq_seed")
    return req.seed if req.seed is not None else req.seq_seed


def build_params(n: int, seed: int | None, **fields: Any) -> list[Any]:
    """One SamplingParams per choice; a seeded request gives choice i the seed ``seed + i``."""
    from engine.sampling.params import SamplingParams

    given = {key: value for key, value in fields.items() if value is not None}
    params = []
    for i in range(n):
        try:
            params.append(SamplingParams(**given, seed=None if seed is None else seed + i))
        except (TypeError, ValueError) as exc:
            # SamplingParams starts each message with the field it refuses.
            first = str(exc).split(" ", 1)[0]
            param = first if first in given or first == "seed" else None
            raise bad_request(f"Invalid sampling parameters: {exc}", param=param) from exc
    return params


# The OpenAI sampling fields that SamplingParams takes under the same name, as they are.
_OPENAI_PASSED_THROUGH = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "stop_token_ids",
    "ignore_eos",
    "min_tokens",
    "skip_special_tokens",
    "include_stop_str_in_output",
)


def openai_params(req: Any, max_tokens: int, logprobs: int | None) -> list[Any]:
    """SamplingParams for an OpenAI completions or chat request (their sampling fields are the same)."""
    passed = {name: getattr(req, name) for name in _OPENAI_PASSED_THROUGH}
    return build_params(
        req.n, request_seed(req), max_tokens=max_tokens, stop=stop_list(req.stop), logprobs=logprobs, **passed
    )
