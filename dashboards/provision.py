"""Create or update the Prometheus data source, the folder and the dashboards in a Grafana, idempotently.

Identity is by uid everywhere, so running this twice never duplicates anything: the second run
finds each object, leaves identical ones alone and overwrites the ones that drifted.
"""

from __future__ import annotations

from dataclasses import dataclass

from grafana_client import GrafanaApi
from grafana_client.client import GrafanaClientError

from dashboards.catalog import all_dashboards
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


def _get_or_none(call, *args):
    try:
        return call(*args)
    except GrafanaClientError as exc:
        if exc.status_code == 404:
            return None
        raise


def _ensure_datasource(api: GrafanaApi, prometheus_url: str) -> Action:
    wanted = datasource_body(prometheus_url)
    current = _get_or_none(api.datasource.get_datasource_by_uid, DATASOURCE_UID)
    if current is None:
        api.datasource.create_datasource(wanted)
        return Action("datasource", DATASOURCE_UID, "created")
    if all(current.get(key) == value for key, value in wanted.items()):
        return Action("datasource", DATASOURCE_UID, "unchanged")
    api.datasource.update_datasource_by_uid(DATASOURCE_UID, wanted)
    return Action("datasource", DATASOURCE_UID, "updated")


def _ensure_folder(api: GrafanaApi) -> Action:
    if _get_or_none(api.folder.get_folder, FOLDER_UID) is not None:
        return Action("folder", FOLDER_UID, "unchanged")
    api.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)
    return Action("folder", FOLDER_UID, "created")


def _without_server_fields(board: dict) -> dict:
    """Grafana adds id and version to a stored dashboard; they are not part of what we define."""
    return {key: value for key, value in board.items() if key not in ("id", "version")}


def _ensure_dashboard(api: GrafanaApi, board: dict) -> Action:
    current = _get_or_none(api.dashboard.get_dashboard, board["uid"])
    if current is not None:
        stored = current.get("dashboard", {})
        in_folder = current.get("meta", {}).get("folderUid") == FOLDER_UID
        if in_folder and _without_server_fields(stored) == board:
            return Action("dashboard", board["uid"], "unchanged")
    api.dashboard.update_dashboard(
        {
            "dashboard": {**board, "id": None},
            "folderUid": FOLDER_UID,
            "overwrite": current is not None,
            "message": "provisioned by chassis dashboards provision",
        }
    )
    return Action("dashboard", board["uid"], "updated" if current is not None else "created")


def provision(api: GrafanaApi, prometheus_url: str) -> list[Action]:
    actions = [_ensure_datasource(api, prometheus_url), _ensure_folder(api)]
    actions += [_ensure_dashboard(api, board) for board in all_dashboards()]
    return actions


def connect(grafana_url: str, token: str, timeout: float = 10.0) -> GrafanaApi:
    """A client for ``grafana_url`` authenticated with a service-account token (Bearer)."""
    api = GrafanaApi.from_url(grafana_url, credential=token, timeout=timeout)
    api.connect()  # GET /api/health: fails fast with a clear error when Grafana is not there
    return api
