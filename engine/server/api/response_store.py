"""Bounded in-memory store of finished responses, for ``previous_response_id`` and GET."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from engine.server.conversation import Message


@dataclass
class StoredResponse:
    body: dict[str, Any]
    history: list[Message]  # the conversation up to and including this response's output


class ResponseStore:
    def __init__(self, capacity: int = 1024):
        self.capacity = capacity
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, response_id: str, stored: StoredResponse) -> None:
        self._items[response_id] = stored
        self._items.move_to_end(response_id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        stored = self._items.get(response_id)
        if stored is not None:
            self._items.move_to_end(response_id)
        return stored

    def __len__(self) -> int:
        return len(self._items)
