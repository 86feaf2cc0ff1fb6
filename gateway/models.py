"""The gateway's /v1/models: each served model's card as its replicas describe it.

A replica's card (vLLM's shape: ``root`` is the checkpoint it serves, ``parent`` null for a base
model, ``max_model_len``) is fetched from a routable replica and kept, so the list still answers
while every replica of a model is briefly unreachable.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import quote

import httpx

from gateway.pool import ModelPool

log = logging.getLogger(__name__)


def fallback_card(name: str) -> dict:
    """The card of a model no replica has described yet: its id stands for its root, as in vLLM."""
    return {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "chassis",
        "root": name,
        "parent": None,
        "max_model_len": None,
    }


async def model_card(pool: ModelPool, client: httpx.AsyncClient) -> dict:
    for replica in pool.routable():
        try:
            response = await client.get(f"{replica.url}/v1/models/{quote(pool.name, safe='')}")
            card = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("no model card from %s: %r", replica.replica_id, exc)
            continue
        if isinstance(card, dict) and card.get("id") == pool.name:
            pool.card = card
            return card
    return pool.card or fallback_card(pool.name)
