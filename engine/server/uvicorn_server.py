"""uvicorn's server with the replica's drain semantics on SIGTERM / SIGINT."""

from __future__ import annotations

from types import FrameType

import uvicorn

from engine.server.state import ServerState


class DrainingServer(uvicorn.Server):
    """On a stop signal: mark the replica draining (/health says so, new requests get 503), then let
    uvicorn stop accepting connections and wait for in-flight responses up to its graceful timeout."""

    def __init__(self, config: uvicorn.Config, state: ServerState):
        super().__init__(config)
        self._state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._state.draining = True
        super().handle_exit(sig, frame)

    def request_exit(self) -> None:
        self.should_exit = True
