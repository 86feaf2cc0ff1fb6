"""Forward one request to a replica and stream its answer back, chunk by chunk.

Until the first byte of the replica's body arrives nothing has reached the client, so a connect
error, a 5xx (a draining replica answers 503), a timeout or a dropped connection is retried on
another replica. Once the first byte is sent the request is committed: a failure after that ends
the client's response, never replays it. A client that disconnects cancels the whole exchange,
which closes the upstream connection so the replica aborts the request too. A 4xx is the replica's
answer to a bad request, not a replica failure: it is relayed with its status and body unchanged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import httpx

from gateway.metrics import GatewayMetrics
from gateway.policies import Decision
from gateway.pool import ModelPool
from gateway.replica import Replica

log = logging.getLogger(__name__)

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "accept-encoding",
}
# The gateway's own server writes date and server on every response; the replica's would double them.
_NOT_RELAYED = _HOP_BY_HOP | {"date", "server"}
REPLICA_HEADER = "x-chassis-replica"
ANTHROPIC_APIS = frozenset({"messages", "count_tokens"})


def error_body(
    api: str, status: int, message: str, kind: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    if api in ANTHROPIC_APIS:  # Anthropic's error shape
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    error = {"message": message, "type": kind, "param": param, "code": code or status}
    return json.dumps({"error": error}).encode()


@dataclass
class PrefillPhase:
    """A disaggregated request's first phase (gateway/disaggregation.py)."""

    decide: Callable[[list[str]], Decision | None]  # the prefill replica, among the model's prefill ones
    body: bytes  # the prefill-only request


@dataclass
class ForwardPlan:
    pool: ModelPool
    api: str
    path: str
    body: bytes
    headers: list[tuple[bytes, bytes]]
    # Picks a replica, excluding the ids given; None when no replica is left.
    decide: Callable[[list[str]], Decision | None]
    attempts: int
    method: str = "POST"
    prefill: PrefillPhase | None = None


class ProxyResponse:
    """An ASGI response that does the forwarding itself, so a disconnect is seen at any moment."""

    def __init__(self, plan: ForwardPlan, client: httpx.AsyncClient, metrics: GatewayMetrics) -> None:
        self.plan = plan
        self.client = client
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        async with anyio.create_task_group() as group:

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        group.cancel_scope.cancel()
                        return

            group.start_soon(watch_disconnect)
            try:
                await self._forward(send)
            finally:
                group.cancel_scope.cancel()

    async def _forward(self, send) -> None:
        plan = self.plan
        if plan.prefill is not None:
            outcome = await self._prefill(plan.prefill)
            self.metrics.prefill_phases.labels(plan.pool.name, outcome).inc()
        tried: list[str] = []
        last_error = "no routable replica"
        for attempt in range(plan.attempts):
            decision = plan.decide(tried)
            if decision is None:
                break
            replica = decision.replica
            tried.append(replica.replica_id)
            if attempt > 0:
                self.metrics.retries.labels(plan.pool.name).inc()
            try:
                outcome = await self._try_replica(replica, send)
            finally:
                plan.pool.request_ended(decision)
            if outcome is None:
                return
            last_error = f"replica {replica.replica_id}: {outcome}"
        status = 503
        log.warning("request for %s failed on %s: %s", plan.pool.name, tried or "no replica", last_error)
        await _send_simple(send, status, error_body(plan.api, status, last_error, "service_unavailable"))

    async def _try_replica(self, replica: Replica, send) -> str | None:
        """Forward to one replica. None: the request is done (answered); else why it failed early."""
        plan, metrics, rid = self.plan, self.metrics, replica.replica_id
        replica.in_flight += 1
        metrics.in_flight.labels(rid).inc()
        response: httpx.Response | None = None
        committed = False
        try:
            request = self.client.build_request(
                plan.method, f"{replica.url}{plan.path}", content=plan.body, headers=plan.headers
            )
            try:
                response = await self.client.send(request, stream=True)
                if response.status_code >= 500:
                    kind = "draining" if response.status_code == 503 else "status_5xx"
                    if kind == "draining":
                        replica.draining = True
                    return self._early_failure(replica, kind, f"HTTP {response.status_code}")
                chunks = response.aiter_raw()
                first = await anext(chunks, b"")
            except httpx.TimeoutException as exc:
                return self._early_failure(replica, "timeout", repr(exc))
            except httpx.HTTPError as exc:
                return self._early_failure(replica, "connect", repr(exc))
            committed = True
            if plan.api == "responses" and response.status_code < 400:
                plan.pool.remember_response(first, rid)
            headers = [(k.encode(), v.encode()) for k, v in response.headers.items() if k not in _NOT_RELAYED]
            headers.append((REPLICA_HEADER.encode(), rid.encode()))
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            if first:
                await send({"type": "http.response.body", "body": first, "more_body": True})
            try:
                async for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.HTTPError as exc:
                # Committed: the client has bytes already; end its response, never replay.
                metrics.upstream_errors.labels(rid, "stream").inc()
                metrics.requests.labels(plan.pool.name, rid, plan.pool.policy.name, "stream_error").inc()
                log.warning("stream from %s broke after the first byte: %r", rid, exc)
                replica.breaker.record_failure()
                return None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            outcome = "ok" if response.status_code < 400 else f"http_{response.status_code}"
            metrics.requests.labels(plan.pool.name, rid, plan.pool.policy.name, outcome).inc()
            replica.breaker.record_success()
            replica.requests_served += 1
            return None
        except anyio.get_cancelled_exc_class():
            if committed:
                metrics.requests.labels(plan.pool.name, rid, plan.pool.policy.name, "client_gone").inc()
            raise
        finally:
            replica.in_flight -= 1
            metrics.in_flight.labels(rid).dec()
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()

    async def _prefill(self, phase: PrefillPhase) -> str:
        """Have a prefill replica compute the prompt's KV into the shared tier. Returns the outcome;
        any but "ok" only means the decode replica computes the prompt itself."""
        plan, metrics = self.plan, self.metrics
        if plan.pool.prefill_saturated():
            return "busy"
        decision = phase.decide([])
        if decision is None:
            return "no_replica"
        replica = decision.replica
        rid = replica.replica_id
        replica.in_flight += 1
        metrics.in_flight.labels(rid).inc()
        try:
            response = await self.client.post(
                f"{replica.url}{plan.path}", content=phase.body, headers=plan.headers
            )
        except httpx.TimeoutException as exc:
            self._early_failure(replica, "timeout", repr(exc))
            return "timeout"
        except httpx.HTTPError as exc:
            self._early_failure(replica, "connect", repr(exc))
            return "connect"
        finally:
            replica.in_flight -= 1
            metrics.in_flight.labels(rid).dec()
            plan.pool.request_ended(decision)
        if response.status_code >= 500:
            kind = "draining" if response.status_code == 503 else "status_5xx"
            replica.draining = replica.draining or kind == "draining"
            self._early_failure(replica, kind, f"HTTP {response.status_code}")
            return kind
        if response.status_code >= 400:  # the decode replica will give the client the real answer
            return f"http_{response.status_code}"
        replica.breaker.record_success()
        replica.requests_served += 1
        return "ok"

    def _early_failure(self, replica: Replica, kind: str, detail: str) -> str:
        self.metrics.upstream_errors.labels(replica.replica_id, kind).inc()
        if kind != "draining" and replica.breaker.record_failure():
            self.metrics.ejections.labels(replica.replica_id).inc()
            self.metrics.ejected.labels(replica.replica_id).set(1)
            log.warning("replica %s ejected after %s", replica.replica_id, detail)
        return f"{kind} ({detail})"


async def _send_simple(send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
