"""Create or update the Prometheus data source, the folder and the dashboards in a Grafana, idempotently.

Identity is by uid everywhere, so running this twice never duplicates anything: the second run
finds each object, leaves identical ones alone and overwrites the ones that drifted.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboards.catalog import all_dashboards
from dashboards.grafana_http import GrafanaHTTP
from dashboards.panels import DATASOURCE_UID

FOLDER_UID = "chassis"
FOLDER_TITLE = "Chassis"
DATASOURCE_NAME = "Chassis Prometheus"


@dataclass(frozen=True)
class Action:
    kind: str  # datasource | folder | dashboard
    uid: str
    outcome: str  # created | updated | unchanged

    def __str__(self) -> str:
        return f"{self.kind} {self.uid}: {self.outcome}"


def datasource_body(prometheus_url: str) -> dict:
    return {
        "uid": DATASOURCE_UID,
        "name": DATASOURCE_NAME,
        "type": "prometheus",
        "access": "proxy",
        "url": prometheus_url,
        "isDefault": False,
        "jsonData": {"httpMethod": "POST", "timeInterval": "15s"},
    }


def _ensure_datasource(api: GrafanaHTTP, prometheus_url: str) -> Action:
    wanted = datasource_body(prometheus_url)
    current = api.get(f"/api/datasources/uid/{DATASOURCE_UID}")
    if current is None:
        api.post("/api/datasources", wanted)
        return Action("datasource", DATASOURCE_UID, "created")
    if all(current.get(key) == value for key, value in wanted.items()):
        return Action("datasource", DATASOURCE_UID, "unchanged")
    api.put(f"/api/datasources/uid/{DATASOURCE_UID}", wanted)
    return Action("datasource", DATASOURCE_UID, "updated")


def _ensure_folder(api: GrafanaHTTP) -> Action:
    if api.get(f"/api/folders/{FOLDER_UID}") is not None:
        return Action("folder", FOLDER_UID, "unchanged")
    api.post("/api/folders", {"uid": FOLDER_UID, "title": FOLDER_TITLE})
    return Action("folder", FOLDER_UID, "created")


def _without_server_fields(board: dict) -> dict:
    """Grafana adds id and version to a stored dashboard; they are not part of what we define."""
    return {key: value for key, value in board.items() if key not in ("id", "version")}


def _ensure_dashboard(api: GrafanaHTTP, board: dict) -> Action:
    current = api.get(f"/api/dashboards/uid/{board['uid']}")
    if current is not None:
        stored = current.get("dashboard", {})
        in_folder = current.get("meta", {}).get("folderUid") == FOLDER_UID
        if in_folder and _without_server_fields(stored) == board:
            return Action("dashboard", board["uid"], "unchanged")
    api.post(
        "/api/dashboards/db",
        {
            "dashboard": {**board, "id": None},
            "folderUid": FOLDER_UID,
            "overwrite": current is not None,
            "message": "provisioned by chassis dashboards provision",
        },
    )
    return Action("dashboard", board["uid"], "updated" if current is not None else "created")


def provision(api: GrafanaHTTP, prometheus_url: str) -> list[Action]:
    actions = [_ensure_datasource(api, prometheus_url), _ensure_folder(api)]
    actions += [_ensure_dashboard(api, board) for board in all_dashboards()]
    return actions
