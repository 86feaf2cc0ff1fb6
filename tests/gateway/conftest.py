"""Real HTTP servers on loopback for the gateway tests: uvicorn in a thread, on a free port."""

from __future__ import annotations

import pytest

from tests.support.servers import ServerThread


@pytest.fixture
def serve():
    servers: list[ServerThread] = []

    def start(app, port: int | None = None) -> ServerThread:
        server = ServerThread(app, port).start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()
