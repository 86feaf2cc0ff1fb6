"""Server-sent events framing for the three APIs."""

from __future__ import annotations

import json
from typing import Any

DONE = "data: [DONE]\n\n"


def _dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def data_event(payload: Any) -> str:
    """OpenAI Chat / Completions style: ``data:`` lines only, ended by ``data: [DONE]``."""
    return f"data: {_dumps(payload)}\n\n"


def named_event(payload: dict[str, Any]) -> str:
    """Anthropic / Responses style: the event name repeats the payload's ``type``."""
    return f"event: {payload['type']}\ndata: {_dumps(payload)}\n\n"
