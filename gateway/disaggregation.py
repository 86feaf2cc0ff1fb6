"""Prefill/decode disaggregation: the prefill-only request a gateway sends a prefill replica first.

A deployment with replicas of role ``prefill`` and ``decode`` serves a generation request in two
phases. The prefill replica (``chassis serve --kv-role prefill``) gets the same body as a one-token,
non-streamed request: it renders the same prompt with the same cache salt, computes its KV and
writes every full block to the shared tier before it answers. The original request then goes to a
decode replica, whose prefix lookup onloads those blocks and decodes from there. The prefill phase
only ever saves work: whatever its outcome (replica down, timeout, an error status), the decode
replica still gets the request and prefills what it does not find, so no answer depends on it.
"""

from __future__ import annotations

import json

# APIs whose prompt a prefill replica can compute ahead; token counting and stored responses are not
# generations.
PREFILL_APIS = frozenset({"chat", "completions", "messages", "responses"})
# Fields that would make a one-token request invalid or costlier without changing its prompt.
_DROPPED = (
    "stream_options",
    "max_completion_tokens",
    "min_tokens",
    "n",
    "best_of",
    "logprobs",
    "top_logprobs",
)


def prefill_body(api: str, body: dict) -> bytes | None:
    """The prefill-only request for ``body``, or None when it has no prefill phase (the API is not a
    generation, or a Responses request continues a stored response that lives on one replica)."""
    if api not in PREFILL_APIS:
        return None
    if api == "responses" and body.get("previous_response_id"):
        return None
    prefill = {k: v for k, v in body.items() if k not in _DROPPED}
    prefill["stream"] = False
    if api == "responses":
        prefill["max_output_tokens"] = 1
        prefill["store"] = False  # the answer is thrown away; a stored copy would only take room
    else:
        prefill["max_tokens"] = 1
    return json.dumps(prefill).encode()
