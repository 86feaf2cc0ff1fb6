"""A real ASGI app served by uvicorn in a thread on a loopback port."""

from __future__ import annotations

import threading

import uvicorn

from tests.support.ports import free_port
from tests.support.waiting import wait_until


class ServerThread:
    def __init__(self, app, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError(f"server on {self.url} exited before it started")
            return self.server.started

        wait_until(started, f"the server on {self.url} to start", poll=0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
