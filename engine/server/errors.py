"""API errors and their two wire shapes (OpenAI and Anthropic).

Handlers raise ``APIError``; the app turns it into OpenAI-shaped JSON, or Anthropic-shaped JSON on
``/v1/messages``. Pydantic validation errors become 400s that name the offending parameter.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from engine.core.prompt_validation import OutOfVocabulary

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    503: "service_unavailable",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    503: "overloaded_error",
}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def as_api_error(exc: Exception) -> APIError:
    """Any failure during generation, in API form (engine errors become 500s with their message)."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, OutOfVocabulary):
        return APIError(400, str(exc), param="prompt")
    if isinstance(exc, ValueError):
        return APIError(400, str(exc))
    return APIError(500, f"Internal error: {type(exc).__name__}: {exc}")


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


def unsupported(param: str, detail: str = "") -> APIError:
    suffix = f": {detail}" if detail else ""
    return APIError(
        400, f"Unsupported parameter: '{param}' is not supported by this server{suffix}", param=param
    )


def from_validation_error(exc: ValidationError) -> APIError:
    """The first problem of a pydantic error as a 400 naming the parameter."""
    first = exc.errors(include_url=False)[0]
    param = ".".join(str(part) for part in first["loc"]) or None
    if first["type"] == "extra_forbidden":
        return APIError(400, f"Unrecognized request argument supplied: {param}", param=param)
    if first["type"] == "missing":
        return APIError(400, f"Missing required parameter: '{param}'", param=param)
    return APIError(400, f"Invalid value for '{param}': {first['msg']}", param=param)


def openai_body(err: APIError) -> dict[str, Any]:
    return {
        "error": {
            "message": err.message,
            "type": _OPENAI_TYPES.get(err.status, "server_error"),
            "param": err.param,
            "code": err.code,
        }
    }


def anthropic_body(err: APIError) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": _ANTHROPIC_TYPES.get(err.status, "api_error"), "message": err.message},
    }
