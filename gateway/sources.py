"""Where the gateway learns its models and replicas: a static file or the control plane's REST API."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.config import (
    ConfigError,
    ModelRoute,
    PolicyConfig,
    ReplicaSpec,
    parse_policy,
)


class SourceError(RuntimeError):
    """The source could not produce a replica list this time; the gateway keeps its last good one."""


class StaticSource:
    def __init__(self, models: dict[str, ModelRoute]) -> None:
        self._models = models

    async def fetch(self) -> dict[str, ModelRoute]:
        return self._models


class ControlPlaneSource:
    """Reads ``/api/v1/deployments/`` and ``/api/v1/replicas/?state=ready`` with a bearer token."""

    def __init__(self, base_url: str, token: str | None, client: httpx.AsyncClient) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = client

    async def get_all(self, path: str, params: dict | None = None) -> list[dict]:
        """Every item of a (paginated) list endpoint; SourceError says why it could not be read."""
        url: str | None = f"{self.base_url}{path}"
        items: list[dict] = []
        while url:
            try:
                response = await self.client.get(url, params=params, headers=self.headers)
            except httpx.HTTPError as exc:
                raise SourceError(f"control plane unreachable at {self.base_url}: {exc!r}") from exc
            if response.status_code in (401, 403):
                raise SourceError(
                    f"control plane refused the token ({response.status_code}): {response.text[:200]}"
                )
            if response.status_code != 200:
                raise SourceError(f"GET {url} answered {response.status_code}: {response.text[:200]}")
            data = response.json()
            if isinstance(data, list):
                return items + data
            items.extend(data.get("results", []))
            url, params = data.get("next"), None
        return items

    async def fetch(self) -> dict[str, ModelRoute]:
        deployments = await self.get_all("/api/v1/deployments/")
        replicas = await self.get_all("/api/v1/replicas/", {"state": "ready"})
        try:  # checkpoint paths give the tokenizer; routing still works by load without them
            checkpoints = await self.get_all("/api/v1/checkpoints/")
        except SourceError:
            checkpoints = []
        return routes_from_api(deployments, replicas, checkpoints)


def _deployment_key(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("id", value.get("name"))
    return None if value is None else str(value)


def _policy_name(value: Any) -> Any:
    # The control plane spells policies in kebab case ("cache-aware"); the gateway in snake case.
    return value.replace("-", "_") if isinstance(value, str) else value


def routes_from_api(
    deployments: list[dict], replicas: list[dict], checkpoints: list[dict] | None = None
) -> dict[str, ModelRoute]:
    """Routes from the control plane's serializers (serving.api: DeploymentSerializer, ReplicaSerializer;
    checkpoints.api: CheckpointSerializer)."""
    by_key: dict[str, dict] = {}
    for deployment in deployments:
        for key in ("id", "name", "url"):
            if deployment.get(key) is not None:
                by_key[str(deployment[key])] = deployment
    checkpoint_paths = {str(c.get("id")): c.get("path") for c in checkpoints or []}
    grouped: dict[str, list[ReplicaSpec]] = {}
    policies: dict[str, PolicyConfig] = {}
    tokenizers: dict[str, str | None] = {}
    for replica in replicas:
        if replica.get("state", "ready") != "ready" or not replica.get("url"):
            continue
        deployment = by_key.get(_deployment_key(replica.get("deployment")) or "", {})
        model = (
            replica.get("served_model_name") or deployment.get("served_model_name") or deployment.get("name")
        )
        if not model:
            continue
        try:
            spec = ReplicaSpec.from_url(
                replica["url"], replica.get("name") or replica.get("id"), replica.get("role")
            )
            policy = parse_policy(
                _policy_name(
                    replica.get("routing_policy") or deployment.get("routing_policy") or "cache_aware"
                ),
                f"deployment {deployment.get('name') or replica.get('deployment_name')}.routing_policy",
            )
        except ConfigError:
            continue  # one malformed row must not take the whole gateway down
        grouped.setdefault(model, []).append(spec)
        policies[model] = policy
        tokenizers[model] = checkpoint_paths.get(str(_deployment_key(deployment.get("checkpoint"))))
    routes = {
        model: ModelRoute(
            name=model, policy=policies[model], replicas=tuple(specs), tokenizer=tokenizers[model]
        )
        for model, specs in grouped.items()
    }
    for deployment in deployments:
        model = deployment.get("served_model_name") or deployment.get("name")
        if model and model not in routes:
            routes[model] = ModelRoute(
                name=model, policy=PolicyConfig(), replicas=(), unavailable=unavailable_reason(deployment)
            )
    return routes


def unavailable_reason(deployment: dict) -> str:
    """Why a deployment with no ready replica serves nothing, from its DeploymentSerializer fields."""
    name = deployment.get("name") or deployment.get("served_model_name")
    desired, ready = deployment.get("replicas"), deployment.get("ready_replicas") or 0
    if desired == 0:
        state = "is scaled to 0 replicas"
    elif deployment.get("placement_status") == "unschedulable":
        state = f"is unschedulable: {deployment.get('placement_reason')}"
    elif deployment.get("rollout_status") == "failed":
        state = f"has a failed rollout: {deployment.get('rollout_reason')}"
    elif desired is None:
        state = "has no ready replica"
    else:
        state = f"is starting: {ready} of {desired} replicas ready"
    return f"deployment {name} {state}"[:500]
