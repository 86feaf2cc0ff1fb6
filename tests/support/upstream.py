"""A small real replica-like HTTP app for unit-testing the gateway's proxy and KV follower.

It speaks just enough of a replica's surface (chat completions with SSE, /health, /metrics, KV
events from the engine's real ``KVEventLog``) and lets a test switch it into failure modes, or
hold its streams with a ``ChunkGate`` so a test decides when each chunk may leave. The
end-to-end tests use real ``chassis serve`` replicas instead.
"""

from __future__ import annotations

import asyncio
import json
import threading

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.kv.events import KVEventLog


class ChunkGate:
    """Stream chunks leave one per ``release()``: the test's thread releases, the server's event
    loop waits. ``waiting`` counts the streams held at the gate, so a test can wait for that."""

    def __init__(self) -> None:
        self._permits = threading.Semaphore(0)
        self.waiting = 0

    def release(self, chunks: int = 1) -> None:
        self._permits.release(chunks)

    async def wait(self) -> None:
        self.waiting += 1
        try:
            while not self._permits.acquire(blocking=False):
                await asyncio.sleep(0.005)
        finally:
            self.waiting -= 1


def client_error_body(path: str) -> dict:
    """What a replica answers to a request with a bad field, in the API's own error shape."""
    message = "Invalid value for 'seed': must be at most 2**63 - 1"
    if path == "/v1/messages":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": "seed", "code": None}}


class Upstream:
    def __init__(self, replica_id: str, block_size: int = 4, log_capacity: int = 1000) -> None:
        self.replica_id = replica_id
        self.block_size = block_size
        self.kv = KVEventLog(capacity=log_capacity)
        self.mode = "ok"  # ok | status_400 | status_500 | draining | break_after_first
        self.gate: ChunkGate | None = None  # when set, every stream chunk waits for a release
        self.received: list[dict] = []
        self.received_headers: list[dict[bytes, bytes]] = []
        self.completed = 0
        self.aborted = 0
        self.waiting = 0.0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.chat, methods=["POST"]),
                Route("/v1/messages", self.chat, methods=["POST"]),
                Route("/v1/models/{model_id:path}", self.model_card),
                Route("/health", self.health),
                Route("/metrics", self.metrics),
                Route("/kv/events", self.kv_events),
                Route("/kv/snapshot", self.kv_snapshot),
            ]
        )

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        self.received.append(body)
        self.received_headers.append(dict(request.headers.raw))
        if self.mode == "status_400":
            return JSONResponse(client_error_body(request.url.path), 400)
        if self.mode == "status_500":
            return JSONResponse({"error": {"message": "boom"}}, 500)
        if self.mode == "draining":
            return JSONResponse({"error": {"message": "draining"}}, 503)
        n = int(body.get("max_tokens", 3))
        if not body.get("stream"):
            self.completed += 1
            message = {"role": "assistant", "content": "x" * n}
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
                },
                headers={"x-served-by": self.replica_id},
            )

        async def events():
            finished = False
            try:
                for i in range(n):
                    if self.gate is not None:
                        await self.gate.wait()
                    chunk = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}],
                    }
                    yield f"data: {json.dumps(chunk)}\n\n"
                    if self.mode == "break_after_first":
                        raise RuntimeError("replica crashed mid-stream")
                yield "data: [DONE]\n\n"
                finished = True
                self.completed += 1
            finally:
                if not finished and self.mode != "break_after_first":
                    self.aborted += 1

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"x-served-by": self.replica_id}
        )

    async def model_card(self, request: Request) -> Response:
        """A replica's card for any model asked: its root names this replica, so a test sees whose."""
        card = {"id": request.path_params["model_id"], "object": "model", "created": 0, "owned_by": "chassis"}
        return JSONResponse({**card, "root": f"/checkpoints/{self.replica_id}", "parent": None})

    async def health(self, request: Request) -> Response:
        if self.mode == "draining":
            return JSONResponse({"status": "draining"}, 503)
        return JSONResponse({"status": "ok"})

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="m"} 0.0\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
        )

    async def kv_events(self, request: Request) -> Response:
        after = int(request.query_params.get("after", "0"))
        events = self.kv.events_since(after)
        if events is None:
            return JSONResponse({"error": "too old"}, 410)
        return JSONResponse(
            {
                "replica_id": self.replica_id,
                "block_size": self.block_size,
                "last_seq": self.kv.last_seq,
                "events": events,
            }
        )

    async def kv_snapshot(self, request: Request) -> Response:
        last_seq, tiers = self.kv.tier_snapshot()
        return JSONResponse(
            {
                "replica_id": self.replica_id,
                "block_size": self.block_size,
                "last_seq": last_seq,
                "hashes": tiers.pop("device"),
                "tiers": tiers,
            }
        )
