"""The gateway's HTTP surface: the replicas' inference APIs, plus /metrics and a state view."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.disaggregation import prefill_body
from gateway.models import model_card
from gateway.prompt import API_PATHS
from gateway.proxy import _HOP_BY_HOP, ANTHROPIC_APIS, ForwardPlan, PrefillPhase, ProxyResponse, error_body
from gateway.service import Gateway

# Routed to any healthy replica of the model, by load: no cache changes their answer.
LOAD_ROUTED_PATHS = {
    "count_tokens": "/v1/messages/count_tokens",
    "tokenize": "/tokenize",
    "detokenize": "/detokenize",
}
# As in vLLM, these may leave out the model; a gateway that serves one model then picks it.
MODEL_OPTIONAL = {"tokenize", "detokenize"}


def _error(api: str, status: int, message: str, kind: str, **fields) -> Response:
    body = error_body(api, status, message, kind, **fields)
    return Response(body, status_code=status, media_type="application/json")


def _model_not_found(api: str, message: str) -> Response:
    kind = "not_found_error" if api in ANTHROPIC_APIS else "invalid_request_error"
    return _error(api, 404, message, kind, param="model", code="model_not_found")


def _api_of(path: str) -> str:
    """Which error shape a path gets, also for paths no route serves."""
    return "messages" if path.startswith("/v1/messages") else "openai"


async def _http_error(request: Request, exc: HTTPException) -> Response:
    """Starlette's 404 (no such path) and 405 (no such method on a path) in the API's error shape."""
    method, path = request.method, request.url.path
    if exc.status_code == 404:
        message = f"Invalid URL ({method} {path}): no such endpoint on this gateway."
    elif exc.status_code == 405:
        message = f"Method {method} is not allowed on {path} (allowed: {(exc.headers or {}).get('Allow')})."
    else:
        message = str(exc.detail)
    response = _error(_api_of(path), exc.status_code, message, "invalid_request_error")
    response.headers.update(exc.headers or {})
    return response


def build_app(gateway: Gateway) -> Starlette:
    def forwarded_headers(request: Request) -> list[tuple[bytes, bytes]]:
        # The bytes the client sent: httpx refuses a str header value that is not ASCII (a 500).
        replaced = _HOP_BY_HOP | set(gateway.replica_auth)
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in replaced]
        headers += [(k.encode(), v.encode()) for k, v in gateway.replica_auth.items()]
        headers.append((b"accept-encoding", b"identity"))
        return headers

    def proxy_endpoint(api: str, path: str):
        async def endpoint(request: Request):
            raw = await request.body()
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return _error(api, 400, "request body must be JSON", "invalid_request_error")
            except RecursionError:
                return _error(api, 400, "request body is nested too deeply", "invalid_request_error")
            if not isinstance(body, dict):
                return _error(api, 400, "request body must be a JSON object", "invalid_request_error")
            model = body.get("model")
            if model is None and api in MODEL_OPTIONAL and len(gateway.pools) == 1:
                model = next(iter(gateway.pools))
            if not isinstance(model, str) or not model:
                return _error(api, 400, "'model' is required", "invalid_request_error", param="model")
            pool = gateway.pools.get(model)
            if pool is None and model in gateway.unavailable:
                message = f"The model `{model}` has no ready replica: {gateway.unavailable[model]}."
                return _error(api, 503, message, "service_unavailable", code="no_ready_replica")
            if pool is None:
                known = ", ".join(sorted(gateway.pools)) or "none"
                return _model_not_found(api, f"The model `{model}` is not served here (served: {known}).")
            decide_prefill, prefill = None, None
            if api in LOAD_ROUTED_PATHS:
                decide = pool.decide_by_load
            else:
                # Rendering the chat template takes milliseconds: off the event loop, so it never
                # delays the chunks of streams already flowing.
                decide, decide_prefill = await asyncio.to_thread(
                    gateway.plan_routing, pool, api, body, request.headers
                )
                prefill = prefill_body(api, body) if decide_prefill is not None else None
            plan = ForwardPlan(
                pool=pool,
                api=api,
                path=path,
                body=raw,
                headers=forwarded_headers(request),
                decide=decide,
                attempts=1 + gateway.config.retries,
                prefill=PrefillPhase(decide_prefill, prefill) if prefill is not None else None,
            )
            return ProxyResponse(plan, gateway.client, gateway.metrics)

        return endpoint

    async def stored_response(request: Request) -> Response:
        """A stored Responses-API answer lives on the replica that made it: ask that one."""
        response_id = request.path_params["response_id"]
        pool = next((p for p in gateway.pools.values() if response_id in p.response_owner), None)
        if pool is None:
            message = f"Response with id '{response_id}' not found."
            return _error("responses", 404, message, "invalid_request_error", param="response_id")
        plan = ForwardPlan(
            pool=pool,
            api="responses",
            path=request.url.path,
            body=b"",
            headers=forwarded_headers(request),
            decide=functools.partial(pool.decide_owner, response_id),
            attempts=1,
            method="GET",
        )
        return ProxyResponse(plan, gateway.client, gateway.metrics)

    def served(name: str):
        pool = gateway.pools.get(name)
        return pool if pool is not None and pool.replicas else None

    async def models(request: Request) -> Response:
        pools = [pool for name, pool in sorted(gateway.pools.items()) if served(name)]
        cards = await asyncio.gather(*(model_card(pool, gateway.probe_client) for pool in pools))
        return JSONResponse({"object": "list", "data": list(cards)})

    async def model(request: Request) -> Response:
        name = request.path_params["model_id"]
        pool = served(name)
        if pool is None:
            return _model_not_found("models", f"The model `{name}` does not exist.")
        return JSONResponse(await model_card(pool, gateway.probe_client))

    async def health(request: Request) -> Response:
        routable = sum(len(pool.routable()) for pool in gateway.pools.values())
        status = 200 if routable else 503
        return JSONResponse(
            {"status": "ok" if routable else "no_routable_replica", "routable": routable}, status
        )

    async def metrics(request: Request) -> Response:
        return Response(gateway.metrics.render(), media_type="text/plain; version=0.0.4")

    async def state(request: Request) -> Response:
        return JSONResponse(gateway.describe())

    async def kv_view(request: Request) -> Response:
        pool = gateway.pools.get(request.path_params["model"])
        replica_id = request.path_params["replica_id"]
        if pool is None or replica_id not in pool.replicas:
            return _error("gateway", 404, "unknown model or replica", "invalid_request_error")
        follower = gateway.follower(pool.name, replica_id)
        return JSONResponse(
            {
                "replica_id": replica_id,
                "seq": follower.seq if follower else None,
                "hashes": sorted(h.hex() for h in pool.index.hashes(replica_id)),
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    proxied = {**API_PATHS, **LOAD_ROUTED_PATHS}
    routes = [Route(path, proxy_endpoint(api, path), methods=["POST"]) for api, path in proxied.items()]
    routes += [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", model, methods=["GET"]),
        Route("/v1/responses/{response_id}", stored_response, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/gateway/state", state, methods=["GET"]),
        Route("/gateway/kv/{model}/{replica_id:path}", kv_view, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error})
