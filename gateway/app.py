"""The gateway's HTTP surface: the replicas' inference APIs, plus /metrics and a state view."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.prompt import API_PATHS
from gateway.proxy import _HOP_BY_HOP, ForwardPlan, ProxyResponse, error_body
from gateway.service import Gateway


def _error(api: str, status: int, message: str, kind: str) -> Response:
    return Response(error_body(api, status, message, kind), status_code=status, media_type="application/json")


def build_app(gateway: Gateway) -> Starlette:
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
            if not isinstance(model, str) or not model:
                return _error(api, 400, "'model' is required", "invalid_request_error")
            pool = gateway.pools.get(model)
            if pool is None:
                known = ", ".join(sorted(gateway.pools)) or "none"
                return _error(
                    api, 404, f"model {model!r} is not served here (served: {known})", "not_found_error"
                )
            replaced = _HOP_BY_HOP | set(gateway.replica_auth)
            headers = [(k, v) for k, v in request.headers.items() if k.lower() not in replaced]
            headers += list(gateway.replica_auth.items())
            headers.append(("accept-encoding", "identity"))
            plan = ForwardPlan(
                pool=pool,
                api=api,
                path=path,
                body=raw,
                headers=headers,
                # Rendering the chat template takes milliseconds: off the event loop, so it never
                # delays the chunks of streams already flowing.
                decide=await asyncio.to_thread(gateway.plan_routing, pool, api, body, request.headers),
                attempts=1 + gateway.config.retries,
            )
            return ProxyResponse(plan, gateway.client, gateway.metrics)

        return endpoint

    async def models(request: Request) -> Response:
        now = int(time.time())
        data = [
            {"id": name, "object": "model", "created": now, "owned_by": "chassis"}
            for name, pool in sorted(gateway.pools.items())
            if pool.replicas
        ]
        return JSONResponse({"object": "list", "data": data})

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
            return JSONResponse({"error": "unknown model or replica"}, 404)
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

    routes = [Route(path, proxy_endpoint(api, path), methods=["POST"]) for api, path in API_PATHS.items()]
    routes += [
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/gateway/state", state, methods=["GET"]),
        Route("/gateway/kv/{model}/{replica_id:path}", kv_view, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
