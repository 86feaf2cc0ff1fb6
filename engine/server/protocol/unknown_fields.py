"""Top-level request fields a request model does not define: ignored, unless they change the output.

Clients written for vLLM or for a newer OpenAI/Anthropic API send fields this server does not know
(``priority``, ``request_id``, ``prompt_cache_key``...). Refusing them breaks those clients for
nothing, so they are ignored (the server logs and counts them). A field that would change what is
generated, or what the answer holds, if it were honoured stays a 400 naming it: ignoring it would
answer a different question than the one asked. Nested objects keep their models' own strictness.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from engine.server.errors import unsupported

# Fields that change the output when honoured, each with the values that change nothing (null always
# changes nothing). A field a request model defines is that model's to take or refuse; this list
# only covers the APIs that do not define it (e.g. ``seed`` on Responses, ``guided_json`` anywhere).
OUTPUT_CHANGING: dict[str, tuple[Any, ...]] = {
    # Sampling and length.
    "n": (1,),
    "best_of": (1,),
    "use_beam_search": (False,),
    "seed": (),
    "temperature": (),
    "top_p": (),
    "top_k": (),
    "min_p": (),
    "repetition_penalty": (1, 1.0),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "logit_bias": ({},),
    "stop": ([],),
    "stop_sequences": ([],),
    "stop_token_ids": ([],),
    "ignore_eos": (False,),
    "min_tokens": (0,),
    "max_tokens": (),
    "max_completion_tokens": (),
    "max_output_tokens": (),
    "bad_words": ([],),
    "allowed_token_ids": (),
    "logits_processors": (),
    "vllm_xargs": (),
    # Structured output and tools.
    "response_format": ({"type": "text"},),
    "guided_json": (),
    "guided_regex": (),
    "guided_choice": (),
    "guided_grammar": (),
    "structural_tag": (),
    "structured_outputs": (),
    "tools": ([],),
    "tool_choice": (),
    "functions": ([],),
    "function_call": (),
    # The prompt and how it is rendered.
    "chat_template": (),
    "chat_template_kwargs": ({},),
    "add_generation_prompt": (True,),
    "continue_final_message": (False,),
    "add_special_tokens": (),
    "documents": (),
    "truncate_prompt_tokens": (),
    "prompt_embeds": (),
    "echo": (False,),
    "suffix": (),
    "context_management": (),
    "thinking": (),
    "reasoning": (),
    "reasoning_effort": (),
    "thinking_token_budget": (),
    # What the answer holds.
    "logprobs": (False,),
    "top_logprobs": (0,),
    "prompt_logprobs": (),
    "return_tokens_as_token_ids": (False,),
    "return_token_ids": (False,),
    "skip_special_tokens": (True,),
    "spaces_between_special_tokens": (True,),
    "include_stop_str_in_output": (False,),
}


def _changes_nothing(value: Any, neutral: tuple[Any, ...]) -> bool:
    # Compared with their types, so that ``true`` never passes for ``1``.
    return value is None or any(type(value) is type(v) and value == v for v in neutral)


def drop_unknown(data: dict[str, Any], model: type[BaseModel]) -> tuple[dict[str, Any], list[str]]:
    """``data`` without the top-level fields ``model`` does not define, and the names dropped.
    Raises a 400 naming the first such field that would change the output."""
    fields = model.model_fields
    kept: dict[str, Any] = {}
    ignored: list[str] = []
    for name, value in data.items():
        if name in fields:
            kept[name] = value
        elif name in OUTPUT_CHANGING and not _changes_nothing(value, OUTPUT_CHANGING[name]):
            raise unsupported(name)
        else:
            ignored.append(name)
    return kept, ignored


M = TypeVar("M", bound=BaseModel)


def validate_lenient(model: type[M], data: dict[str, Any]) -> tuple[M, list[str]]:
    """The request ``data`` as ``model``, unknown top-level fields dropped (see ``drop_unknown``),
    and the names dropped. Raises pydantic's ValidationError for a known field's bad value."""
    kept, ignored = drop_unknown(data, model)
    return model.model_validate(kept), ignored
