"""Request plumbing shared by the route modules: auth, body parsing, SSE responses, disconnects."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError

from engine.server.errors import APIError, bad_request, from_validation_error
from engine.server.protocol.unknown_fields import validate_lenient
from engine.server.state import ServerState

log = logging.getLogger("chassis.server")

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the response was ready; its requests were aborted."""


def server_state(request: Request) -> ServerState:
    return request.app.state.server


def uses_anthropic_shape(path: str) -> bool:
    return path.startswith("/v1/messages")


def require_api_key(request: Request) -> None:
    """FastAPI dependency: Bearer for every API; ``x-api-key`` also on Anthropic's routes."""
    expected = server_state(request).settings.api_key
    if not expected:
        return
    given = ""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    if not given and uses_anthropic_shape(request.url.path):
        given = request.headers.get("x-api-key", "")
    if not given or not hmac.compare_digest(given.encode(), expected.encode()):
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")


async def parse_body(request: Request, model: type[M]) -> M:
    """The body as ``model``; top-level fields it does not know are ignored, logged and counted,
    unless they would change the output (protocol/unknown_fields.py)."""
    raw = await request.body()
    try:
        req, ignored = _validated(raw, model)
    except RecursionError as exc:
        # json.loads and pydantic both recurse once per nesting level.
        raise bad_request("The request body is nested too deeply.") from exc
    if ignored:
        api = request.url.path.removeprefix("/v1/")
        log.warning("%s: ignored unknown request fields %s", api, ", ".join(repr(f[:64]) for f in ignored))
        server_state(request).metrics.fields_ignored(api, ignored)
    return req


def _validated(raw: bytes, model: type[M]) -> tuple[M, list[str]]:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.")
    where = _lone_surrogate(data)
    if where is not None:
        raise bad_request(
            f"Invalid value for '{where}': it holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape "
            "without its pair), which is not Unicode text.",
            param=where,
        )
    try:
        return validate_lenient(model, data)
    except ValidationError as exc:
        raise from_validation_error(exc) from exc


# JSON may escape half of a surrogate pair ("\\ud800"); json.loads keeps it, but such a string cannot
# be encoded, so the tokenizer, the prefix-cache salt or /metrics would fail on it later.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """Where the first string (a value or a key) holding a lone surrogate is, e.g. messages[0].content."""
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, int):
            here = f"{path}[{key}]"
        else:  # the name is quoted in the error, which must itself encode: escape the surrogate
            name = key.encode("utf-8", "backslashreplace").decode("utf-8")
            here = f"{path}.{name}" if path else name
            if name != key:
                return here
        found = _lone_surrogate(item, here)
        if found is not None:
            return found
    return None


def sse(stream: AsyncIterator[str]) -> StreamingResponse:
    # Starlette cancels the iterator when the client disconnects; generation.py then aborts.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Run a non-streaming generation, cancelling it (which aborts its requests) if the client leaves."""
    task = asyncio.ensure_future(work)

    async def wait_for_disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(wait_for_disconnect())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled():
        raise ClientGone()
    return task.result()
