"""A small Prometheus query API on loopback that records every query.

It stands in for a real Prometheus where a test needs what a real one does not do on demand: refuse
a query, or answer exactly the values the test chose (tests/support/prometheus.py runs the real
server, for the answers themselves). It follows Prometheus' documented ``GET /api/v1/query_range`` answer:
``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values":
[[unix_time, "value"], ...]}]}}``, and ``{"status": "error", "errorType": ..., "error": ...}`` with
400 for a query it is told to refuse. ``answer(query, start, end, step)`` decides each series.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

Answer = Callable[[str, float, float, float], list[tuple[float, str]] | None]


class FakePrometheus:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.queries: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != "/api/v1/query_range":
                    return self._send(404, {"status": "error", "errorType": "not_found", "error": parts.path})
                params = {key: values[0] for key, values in parse_qs(parts.query).items()}
                fake.queries.append(params)
                start, end, step = (float(params[key]) for key in ("start", "end", "step"))
                values = fake.answer(params["query"], start, end, step)
                if values is None:
                    return self._send(400, {"status": "error", "errorType": "bad_data", "error": "refused"})
                result = [{"metric": {}, "values": [[at, text] for at, text in values]}] if values else []
                self._send(200, {"status": "success", "data": {"resultType": "matrix", "result": result}})

            def _send(self, status: int, body: dict) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
