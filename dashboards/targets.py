"""Prometheus file-based service discovery (file_sd) for Chassis, fed by the control plane's REST API.

``prometheus.yml`` reads three JSON files from one directory:

- ``replicas.json``: every ready replica (``/api/v1/replicas/?state=ready``), labelled with its
  deployment, replica name, node and role;
- ``gateways.json``: the gateway addresses given on the command line;
- ``control-plane.json``: the control plane's ``/health`` URL, probed by the blackbox exporter
  (the control plane has no ``/metrics`` of its own).

Files are replaced atomically (write + rename), as Prometheus asks, and only when their content
changes. When the control plane cannot be read, the last good ``replicas.json`` stays in place.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from gateway.sources import ControlPlaneSource, SourceError

REPLICAS_FILE = "replicas.json"
GATEWAYS_FILE = "gateways.json"
CONTROL_PLANE_FILE = "control-plane.json"


class TargetsError(Exception):
    """The control plane could not be read; the message says why."""


def fetch_ready_replicas(control_plane: str, token: str | None, timeout: float = 10.0) -> list[dict]:
    """All pages of ``/api/v1/replicas/?state=ready``, read as the gateway reads the control plane."""

    async def fetch() -> list[dict]:
        async with httpx.AsyncClient(timeout=timeout) as client:
            return await ControlPlaneSource(control_plane, token, client).get_all(
                "/api/v1/replicas/", {"state": "ready"}
            )

    try:
        return asyncio.run(fetch())
    except SourceError as exc:
        raise TargetsError(str(exc)) from exc


def replica_groups(replicas: list[dict]) -> list[dict]:
    """One file_sd group per replica, sorted by name so the file is stable between runs."""
    groups = []
    for replica in replicas:
        if replica.get("state", "ready") != "ready" or not replica.get("url"):
            continue
        address = urlsplit(replica["url"]).netloc
        labels = {
            "deployment": replica.get("deployment_name") or "",
            "replica": replica.get("name") or str(replica.get("id", "")),
            "node": replica.get("node_name") or "",
            "role": replica.get("role") or "",
        }
        groups.append({"targets": [address], "labels": {k: v for k, v in labels.items() if v}})
    return sorted(groups, key=lambda g: (g["labels"].get("replica", ""), g["targets"][0]))


def gateway_groups(addresses: list[str]) -> list[dict]:
    return [{"targets": sorted(set(addresses)), "labels": {}}] if addresses else []


def control_plane_groups(control_plane: str) -> list[dict]:
    return [{"targets": [f"{control_plane.rstrip('/')}/health"], "labels": {}}]


def write_atomically(path: Path, groups: list[dict]) -> bool:
    """Replace ``path`` with ``groups`` as JSON if it differs; True when the file changed."""
    text = json.dumps(groups, indent=2, sort_keys=True) + "\n"
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def write_targets(
    out_dir: Path, control_plane: str, token: str | None, gateways: list[str], timeout: float = 10.0
) -> dict[str, int]:
    """Write all three files; returns the number of targets in each. Raises TargetsError when the
    control plane cannot be read (the gateway and control-plane files are still written)."""
    write_atomically(out_dir / GATEWAYS_FILE, gateway_groups(gateways))
    write_atomically(out_dir / CONTROL_PLANE_FILE, control_plane_groups(control_plane))
    replicas = replica_groups(fetch_ready_replicas(control_plane, token, timeout))
    write_atomically(out_dir / REPLICAS_FILE, replicas)
    return {REPLICAS_FILE: len(replicas), GATEWAYS_FILE: len(set(gateways)), CONTROL_PLANE_FILE: 1}
