"""The FastAPI application of one engine replica."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.clients.protocol import EngineClient
from engine.server import routes_ops, routes_tokens, routes_v1, routes_version
from engine.server.errors import APIError, anthropic_body, openai_body
from engine.server.http import ClientGone, uses_anthropic_shape
from engine.server.state import ServerState, ServeSettings

EngineFactory = Callable[[], Awaitable[EngineClient]]  # a started client


def _error_response(request: Request, err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    body = anthropic_body(err) if uses_anthropic_shape(request.url.path) else openai_body(err)
    return JSONResponse(body, status_code=err.status, headers=headers)


def _routing_error(request: Request, exc: StarletteHTTPException) -> APIError:
    """Starlette's 404 (no such path) and 405 (no such method on a path), saying which."""
    method, path = request.method, request.url.path
    if exc.status_code == 404:
        return APIError(404, f"Invalid URL ({method} {path}): no such endpoint on this server.")
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow")
        return APIError(405, f"Method {method} is not allowed on {path} (allowed: {allowed}).")
    return APIError(exc.status_code, str(exc.detail))


def create_app(settings: ServeSettings, engine_factory: EngineFactory) -> FastAPI:
    """The app loads the engine in the background so /health answers (503) while weights load."""
    state = ServerState(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        loading = asyncio.create_task(state.load(engine_factory))
        try:
            yield
        finally:
            state.draining = True
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
            if state.engine is not None:
                await state.engine.shutdown()

    app = FastAPI(title="Chassis engine replica", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.server = state

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return _error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
        param = ".".join(str(p) for p in first["loc"] if p not in ("body", "query", "path")) or None
        return _error_response(
            request, APIError(400, f"Invalid value for '{param}': {first['msg']}", param=param)
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error_response(request, _routing_error(request, exc), headers=exc.headers)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nobody is listening; nginx's "client closed request"

    app.include_router(routes_v1.router)
    app.include_router(routes_tokens.router)
    app.include_router(routes_ops.router)
    app.include_router(routes_version.router)
    app.include_router(routes_ops.protected)
    return app
