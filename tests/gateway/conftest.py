"""Real HTTP servers on loopback for the gateway tests: uvicorn in a thread, on a free port."""

from __future__ import annotations

import threading
import time

import pytest
import uvicorn
from loopback import free_port


class ServerThread:
    def __init__(self, app, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


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
