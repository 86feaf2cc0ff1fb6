"""A small Grafana HTTP API on loopback that records every call.

It stands in for a real Grafana, which cannot run here (no Grafana package in the registries this
machine reaches). It follows Grafana's documented behaviour for the endpoints provisioning uses:
Bearer auth (401 otherwise), 404 for unknown uids, 409 for a duplicate data source or folder,
412 when a dashboard uid exists and ``overwrite`` is false, and ``id``/``version`` added to stored
dashboards.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeGrafana:
    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[tuple[str, str]] = []
        self.datasources: dict[str, dict] = {}
        self.folders: dict[str, dict] = {}
        self.dashboards: dict[str, dict] = {}  # uid -> {"dashboard": ..., "folderUid": ...}
        self._next_id = 1
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeGrafana:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def writes(self) -> list[tuple[str, str]]:
        return [call for call in self.calls if call[0] != "GET"]

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    # --- the API ---------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers, body: dict | None) -> tuple[int, dict]:
        with self._lock:
            self.calls.append((method, path))
            if headers.get("Authorization") != f"Bearer {self.token}":
                return 401, {"message": "invalid API key"}
            return self._route(method, path, body or {})

    def _route(self, method: str, path: str, body: dict) -> tuple[int, dict]:
        if method == "GET" and path == "/api/frontend/settings":
            return 200, {"buildInfo": {"version": "11.3.0", "commit": "fake"}}
        if match := re.fullmatch(r"/api/datasources/uid/([\w-]+)", path):
            uid = match.group(1)
            if uid not in self.datasources:
                return 404, {"message": "Data source not found"}
            if method == "GET":
                return 200, self.datasources[uid]
            if method == "PUT":
                self.datasources[uid] = {**body, "id": self.datasources[uid]["id"], "uid": uid}
                return 200, {"message": "Datasource updated", "datasource": self.datasources[uid]}
        if method == "POST" and path == "/api/datasources":
            if body.get("uid") in self.datasources or any(
                d["name"] == body.get("name") for d in self.datasources.values()
            ):
                return 409, {"message": "data source with the same name already exists"}
            stored = {**body, "id": self._new_id()}
            self.datasources[body["uid"]] = stored
            return 200, {"message": "Datasource added", "id": stored["id"], "datasource": stored}
        if match := re.fullmatch(r"/api/folders/([\w-]+)", path):
            folder = self.folders.get(match.group(1))
            return (200, folder) if folder else (404, {"message": "folder not found"})
        if method == "POST" and path == "/api/folders":
            if body.get("uid") in self.folders:
                return 409, {"message": "a folder with the same name already exists"}
            self.folders[body["uid"]] = {"uid": body["uid"], "title": body["title"], "id": self._new_id()}
            return 200, self.folders[body["uid"]]
        if method == "GET" and (match := re.fullmatch(r"/api/dashboards/uid/([\w-]+)", path)):
            stored = self.dashboards.get(match.group(1))
            if stored is None:
                return 404, {"message": "Dashboard not found"}
            return 200, {"dashboard": stored["dashboard"], "meta": {"folderUid": stored["folderUid"]}}
        if method == "POST" and path == "/api/dashboards/db":
            return self._save_dashboard(body)
        return 404, {"message": f"no route {method} {path}"}

    def _save_dashboard(self, body: dict) -> tuple[int, dict]:
        board = body["dashboard"]
        folder_uid = body.get("folderUid") or ""
        if folder_uid and folder_uid not in self.folders:
            return 400, {"message": "folder not found"}
        existing = self.dashboards.get(board["uid"])
        if existing and not body.get("overwrite"):
            return 412, {"status": "name-exists", "message": "A dashboard with the same uid already exists"}
        version = existing["dashboard"]["version"] + 1 if existing else 1
        board_id = existing["dashboard"]["id"] if existing else self._new_id()
        self.dashboards[board["uid"]] = {
            "dashboard": {**board, "id": board_id, "version": version},
            "folderUid": folder_uid,
        }
        return 200, {"id": board_id, "uid": board["uid"], "status": "success", "version": version}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                status, payload = fake.handle(self.command, self.path.split("?")[0], self.headers, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

        return Handler
