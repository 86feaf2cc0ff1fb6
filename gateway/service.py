"""The gateway's long-lived state and background loops: replica lists, health, KV followers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import httpx

from gateway.config import GatewayConfig
from gateway.health import probe
from gateway.kv_follower import KVFollower
from gateway.metrics import GatewayMetrics
from gateway.policies import Decision
from gateway.pool import ModelPool
from gateway.prompt import cache_salt, prompt_token_ids, session_key
from gateway.sources import SourceError

log = logging.getLogger(__name__)


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        source,
        tokenizer_factory: Callable[[str], object] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.source = source
        self.metrics = GatewayMetrics()
        self.pools: dict[str, ModelPool] = {}
        # Models the source knows with no replica to route to: model -> why (their deployment's state).
        self.unavailable: dict[str, str] = {}
        self.tokenizer_factory = tokenizer_factory
        t = config.timeouts
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(connect=t.connect_s, read=t.read_s, write=t.write_s, pool=t.connect_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
        # Probes and KV polls get short timeouts of their own, never the long generation read timeout.
        self.replica_auth = (
            {"authorization": f"Bearer {config.replica_api_key}"} if config.replica_api_key else {}
        )
        self.probe_client = httpx.AsyncClient(
            timeout=httpx.Timeout(min(2.0, t.read_s), connect=t.connect_s), headers=self.replica_auth
        )
        self.last_refresh_ok: float | None = None
        self.last_refresh_error: str | None = None
        self._followers: dict[tuple[str, str], asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.refresh()
        await self.check_health()
        self._tasks = [
            asyncio.create_task(self._every(self.config.refresh_interval_s, self.refresh)),
            asyncio.create_task(self._every(self.config.health_interval_s, self.check_health)),
        ]

    async def stop(self) -> None:
        tasks = self._tasks + list(self._followers.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._followers.clear()
        await self.client.aclose()
        await self.probe_client.aclose()

    @staticmethod
    async def _every(interval_s: float, func) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await func()
            except Exception:  # a loop that dies silently would freeze the replica list
                log.exception("background task %s failed", getattr(func, "__name__", func))

    # -- replica lists --------------------------------------------------------------------------
    async def refresh(self) -> None:
        try:
            routes = await self.source.fetch()
        except (SourceError, httpx.HTTPError, ValueError) as exc:
            self.last_refresh_error = str(exc)
            log.warning("replica list refresh failed, keeping the last good one: %s", exc)
            return
        self.last_refresh_ok = time.time()
        self.last_refresh_error = None
        self.unavailable = {name: route.unavailable for name, route in routes.items() if route.unavailable}
        routes = {name: route for name, route in routes.items() if not route.unavailable}
        for name in list(self.pools):
            if name not in routes:
                for replica in list(self.pools[name].replicas.values()):
                    self._stop_follower(name, replica.replica_id)
                del self.pools[name]
        for name, route in routes.items():
            if name in self.pools:
                _, removed = self.pools[name].update(route)
            else:
                self.pools[name] = ModelPool(
                    route,
                    self.config.breaker,
                    self.metrics,
                    pending_ttl_s=self.config.pending_prefix_ttl_s,
                    tokenizer_factory=self.tokenizer_factory,
                )
                removed = []
            for replica in removed:
                self._stop_follower(name, replica.replica_id)
            pool = self.pools[name]
            for replica in pool.replicas.values():
                key = (name, replica.replica_id)
                if pool.wants_prefix and key not in self._followers:
                    self._start_follower(pool, replica)
                elif not pool.wants_prefix and key in self._followers:
                    self._stop_follower(name, replica.replica_id)

    def _start_follower(self, pool: ModelPool, replica) -> None:
        def on_block_size(size: int) -> None:
            pool.block_size = size

        follower = KVFollower(
            replica.replica_id, replica.url, pool.index, self.probe_client, self.metrics, on_block_size
        )
        task = asyncio.create_task(follower.run(self.config.kv_poll_interval_s))
        task.follower = follower  # type: ignore[attr-defined]
        self._followers[(pool.name, replica.replica_id)] = task

    def _stop_follower(self, model: str, replica_id: str) -> None:
        task = self._followers.pop((model, replica_id), None)
        if task is not None:
            task.cancel()

    def follower(self, model: str, replica_id: str) -> KVFollower | None:
        task = self._followers.get((model, replica_id))
        return getattr(task, "follower", None)

    # -- health ---------------------------------------------------------------------------------
    async def check_health(self) -> None:
        replicas = [r for pool in self.pools.values() for r in pool.replicas.values()]
        results = await asyncio.gather(
            *(probe(r, self.probe_client) for r in replicas), return_exceptions=True
        )
        for replica, result in zip(replicas, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("health probe of %s crashed: %r", replica.replica_id, result)
                continue
            ejected, readmitted = result
            if ejected:
                self.metrics.ejections.labels(replica.replica_id).inc()
                log.warning("replica %s ejected: failing health checks", replica.replica_id)
            if readmitted:
                log.info("replica %s re-admitted", replica.replica_id)
            self.metrics.ejected.labels(replica.replica_id).set(1 if replica.breaker.is_open else 0)

    # -- routing --------------------------------------------------------------------------------
    def plan_routing(
        self, pool: ModelPool, api: str, body: dict, headers
    ) -> tuple[Callable[[list[str]], Decision | None], Callable[[list[str]], Decision | None] | None]:
        """Tokenize once (timed apart), then return a decide(exclude) closure for each attempt, and
        for a disaggregated pool one that picks the prefill replica (None: no prefill phase)."""
        token_ids = None  # may run in a worker thread: reads the pool, never mutates it
        if pool.wants_prefix and pool.tokenizer is not None:
            start = time.perf_counter()
            token_ids = prompt_token_ids(pool.tokenizer, api, body)
            self.metrics.tokenize_seconds.observe(time.perf_counter() - start)
        salt = cache_salt(api, body)
        key = (
            session_key(body, headers, pool.route.policy.session_header)
            if pool.policy.name == "session"
            else None
        )

        previous = body.get("previous_response_id") if api == "responses" else None
        previous = previous if isinstance(previous, str) else None

        def decide(exclude: list[str]) -> Decision | None:
            return pool.decide(token_ids, salt, key, exclude, previous)

        def decide_prefill(exclude: list[str]) -> Decision | None:
            return pool.decide(token_ids, salt, key, exclude, prefill=True)

        return decide, (decide_prefill if pool.disaggregated else None)

    def describe(self) -> dict:
        return {
            "last_refresh_ok": self.last_refresh_ok,
            "last_refresh_error": self.last_refresh_error,
            "models": [pool.describe() for pool in self.pools.values()],
            "unavailable": self.unavailable,
        }
