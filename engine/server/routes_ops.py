"""Operations routes: health, Prometheus metrics, drain for the control plane, KV events for the gateway."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from engine.kv.events import DEVICE
from engine.server.errors import APIError
from engine.server.http import require_api_key, server_state

router = APIRouter()
protected = APIRouter(dependencies=[Depends(require_api_key)])


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    state = server_state(request)
    if state.load_error:
        status = "failed"
    elif state.draining:
        status = "draining"
    else:
        status = "ready" if state.ready else "loading"
    body: dict = {
        "status": status,
        "model": state.model_name,
        "replica_id": state.settings.replica_id,
        "engine_pid": state.engine_pid,
        "batch_invariant": state.batch_invariant,
    }
    stats = state.engine_stats()
    if stats is not None:
        body.update(num_requests_running=stats.num_running, num_requests_waiting=stats.num_waiting)
    if state.load_error:
        body["error"] = state.load_error
    return JSONResponse(body, status_code=200 if status == "ready" else 503)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(generate_latest(server_state(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)


@protected.post("/admin/drain")
async def drain(request: Request) -> dict:
    state = server_state(request)
    state.draining = True
    stats = state.engine_stats()
    in_flight = 0 if stats is None else stats.num_running + stats.num_waiting
    return {"status": "draining", "in_flight": in_flight}


def _kv_log(request: Request):
    state = server_state(request)
    if not state.ready:
        raise APIError(503, "The model is still loading; retry shortly.")
    return state, state.engine.kv_events


@protected.get("/kv/events")
async def kv_events(request: Request, after: int = Query(0, ge=0)) -> dict:
    state, log = _kv_log(request)
    events = log.events_since(after)
    if events is None:
        raise APIError(
            410, f"Events after seq {after} are gone from the ring; resync from /kv/snapshot.", param="after"
        )
    last_seq = events[-1]["seq"] if events else log.last_seq
    return {
        "replica_id": state.settings.replica_id,
        "block_size": state.settings.block_size,
        "last_seq": last_seq,
        "events": events,
    }


@protected.get("/kv/snapshot")
async def kv_snapshot(request: Request) -> dict:
    state, log = _kv_log(request)
    last_seq, tiers = log.tier_snapshot()
    return {
        "replica_id": state.settings.replica_id,
        "block_size": state.settings.block_size,
        "last_seq": last_seq,
        "hashes": tiers.pop(DEVICE),  # where gateways from before the tiers read the device's
        "tiers": tiers,
    }
