"""What a benchmark ran on, recorded once per run, and how two runs' conditions differ.

Conditions come from two places: the control plane's rows (deployment, checkpoint, the accelerators
its ready replicas hold and their scale-up domains) and the replicas themselves (GET /version: the
engine options as the engine resolved them, dtype, engine/torch/triton/driver versions, code
revision). Replicas that disagree are all listed; the diff compares flattened ``a.b.c`` keys.
"""

from __future__ import annotations

import logging

import httpx

from controlplane.benchmarks.conf import setting
from controlplane.serving.choices import ReplicaState
from controlplane.serving.models import Deployment, Replica

log = logging.getLogger(__name__)
VERSION_KEYS = ("engine", "torch", "triton", "cuda_driver", "python", "code_revision")
# Keys that name one process or one place, not a condition of the measurement.
NOT_CONDITIONS = ("engine_config.model_dir", "replica_id", "model")


def ready_replicas(deployment: Deployment | None) -> list[Replica]:
    if deployment is None:
        return []
    return list(
        Replica.objects.filter(deployment=deployment, state=ReplicaState.READY)
        .select_related("node__domain", "revision")
        .prefetch_related("accelerators")
        .order_by("ordinal")
    )


def _accelerators(replicas: list[Replica]) -> list[dict]:
    """One entry per distinct kind of accelerator, with how many the ready replicas hold."""
    kinds: dict[tuple, int] = {}
    for replica in replicas:
        domain = replica.node.domain if replica.node else None
        for accelerator in replica.accelerators.all():
            key = (
                accelerator.vendor,
                accelerator.model,
                accelerator.memory_bytes,
                domain.interconnect if domain else "",
                domain.name if domain else "",
            )
            kinds[key] = kinds.get(key, 0) + 1
    return [
        {"vendor": v, "model": m, "memory_bytes": mem, "interconnect": ic, "scale_up_domain": d, "count": n}
        for (v, m, mem, ic, d), n in sorted(kinds.items())
    ]


def replica_reports(urls: list[str]) -> list[dict]:
    """GET /version of each replica; one that cannot answer is recorded with the error."""
    reports = []
    with httpx.Client(timeout=float(setting("SCRAPE_TIMEOUT_S"))) as client:
        for url in urls:
            try:
                response = client.get(f"{url}/version")
                response.raise_for_status()
                reports.append(response.json())
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("replica %s /version unreadable: %s", url, exc)
                reports.append({"error": f"{url}/version: {type(exc).__name__}: {exc}"[:300]})
    return reports


def _agreed(reports: list[dict], key: str):
    """The value the replicas agree on; a list of the distinct values when they do not."""
    values = []
    for report in reports:
        if "error" not in report and report.get(key) not in values:
            values.append(report.get(key))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def deployment_conditions(deployment: Deployment, replicas: list[Replica]) -> dict:
    checkpoint = deployment.checkpoint
    return {
        "deployment": {
            "id": deployment.pk,
            "name": deployment.name,
            "served_model_name": deployment.served_model_name,
        },
        "checkpoint": {
            "id": checkpoint.pk,
            "name": str(checkpoint),
            "digest": checkpoint.digest,
            "architecture": checkpoint.architecture,
        },
        "engine_options": dict(sorted(deployment.engine_options.items())),
        "tp_size": deployment.tp_size,
        "replicas": {"desired": deployment.replicas, "ready": len(replicas)},
        # The revisions the ready replicas run (more than one during a rolling update).
        "revisions": sorted({r.revision.number for r in replicas if r.revision_id is not None}),
        "routing_policy": deployment.routing_policy,
        "accelerators": _accelerators(replicas),
    }


def capture(run, deployment: Deployment, replicas: list[Replica], reports: list[dict]) -> dict:
    """The run's full conditions: deployment, checkpoint, hardware, what the replicas report, load."""
    conditions = deployment_conditions(deployment, replicas)
    engine_config = _agreed(reports, "engine_config")
    conditions.update(
        dtype=_agreed(reports, "dtype"),
        engine_config=engine_config if isinstance(engine_config, dict) else {"disagree": engine_config},
        versions={key: _agreed(reports, key) for key in VERSION_KEYS},
        replica_errors=[r["error"] for r in reports if "error" in r],
        workload={**run.load_parameters(), "sweep": run.sweep},
    )
    return conditions


def flatten(conditions: dict, prefix: str = "") -> dict:
    """``{"a": {"b": 1}, "c": [{"d": 2}]}`` -> ``{"a.b": 1, "c.0.d": 2}``; empty objects vanish."""
    flat = {}
    for key, value in conditions.items():
        name = f"{prefix}{key}"
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            value = {str(i): item for i, item in enumerate(value)}
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def diff(before: dict, after: dict, ignore: tuple[str, ...] = ()) -> list[dict]:
    """[{key, before, after}] for every flattened key whose value differs, sorted by key."""
    a, b = flatten(before), flatten(after)
    skipped = NOT_CONDITIONS + ignore
    changed = []
    for key in sorted(set(a) | set(b)):
        if any(key == s or key.startswith(f"{s}.") or key.endswith(f".{s}") for s in skipped):
            continue
        if a.get(key) != b.get(key):
            changed.append({"key": key, "before": a.get(key), "after": b.get(key)})
    return changed


def preview(run, deployment: Deployment) -> dict:
    """What reproducing ``run`` on ``deployment`` would run on now (asks the ready replicas)."""
    replicas = ready_replicas(deployment)
    reports = replica_reports([r.url for r in replicas if r.url])
    return capture(run, deployment, replicas, reports)
