"""The smallest request the KV manager accepts (``engine.kv.kv_manager.KVRequest``), for its tests."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KVRequestStub:
    request_id: str
    all_token_ids: list[int] = field(default_factory=list)
    cache_salt: str | None = None
