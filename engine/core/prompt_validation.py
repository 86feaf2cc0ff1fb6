"""What makes a prompt servable, checked in one place.

``EngineCore.prepare`` runs it before admitting a request; the server's front end runs it too,
synchronously in the HTTP handler, so a bad prompt is a 400 there even when the engine core lives in
another process and would only find out later.
"""

from __future__ import annotations

from typing import Any

from engine.sampling.params import SamplingParams


class OutOfVocabulary(ValueError):
    """A prompt token id the model has no embedding for."""


def validated_prompt_ids(
    prompt: str | list[int], params: Any, tokenizer: Any, vocab_size: int, max_model_len: int
) -> list[int]:
    """The prompt as token ids; ValueError for anything the engine cannot serve."""
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
    if isinstance(prompt, str):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=True)
    elif _are_token_ids(prompt):
        prompt_ids = list(prompt)
        bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
        if bad:
            raise OutOfVocabulary(f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    else:
        raise ValueError("prompt must be a string or a list of token ids")
    if not prompt_ids:
        raise ValueError("prompt is empty")
    if len(prompt_ids) >= max_model_len:
        raise ValueError(
            f"prompt is {len(prompt_ids)} tokens, which leaves no room to generate within "
            f"max_model_len={max_model_len}; shorten the prompt"
        )
    return prompt_ids


def _are_token_ids(prompt: Any) -> bool:
    if not isinstance(prompt, list | tuple):
        return False
    # A request's ids are checked twice (at admission, and by the core that prepares it): plain ints
    # are told in C first, 34 us instead of 141 us for 576 ids on the 2-core dev host.
    return set(map(type, prompt)) <= {int} or all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    )
