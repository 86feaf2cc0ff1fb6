"""Small builders for Grafana dashboard JSON (schema of Grafana 10/11), with a fixed data source uid.

Everything here is pure data: the same inputs give byte-identical JSON, so dashboards can be
diffed, committed and provisioned idempotently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DATASOURCE_UID = "chassis-prometheus"
DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}
GRID_WIDTH = 24
PANEL_HEIGHT = 8


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"  # or "stat"
    width: int = 12
    max_value: float | None = None


@dataclass
class Row:
    title: str
    panels: list[Panel] = field(default_factory=list)


def histogram_quantile(quantile: float, metric: str, by: str, selector: str) -> str:
    """p-quantile of a Prometheus histogram over the dashboard's rate interval, per ``by`` label."""
    matchers = f"{{{selector}}}" if selector else ""
    return (
        f"histogram_quantile({quantile}, sum by (le, {by}) "
        f"(rate({metric}_bucket{matchers}[$__rate_interval])))"
    )


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    defaults: dict = {"unit": panel.unit}
    if panel.max_value is not None:
        defaults["min"] = 0
        defaults["max"] = panel.max_value
    body = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": PANEL_HEIGHT, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            {"datasource": DATASOURCE, "expr": q.expr, "legendFormat": q.legend, "refId": chr(ord("A") + i)}
            for i, q in enumerate(panel.queries)
        ],
    }
    if panel.kind == "timeseries":
        body["options"] = {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    return body


def _layout(rows: list[Row]) -> list[dict]:
    """Rows become collapsible row panels; panels flow left to right and wrap at the grid width."""
    out: list[dict] = []
    next_id = 1
    y = 0
    for row in rows:
        out.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x = 0
                y += PANEL_HEIGHT
            out.append(_panel_json(panel, next_id, x, y))
            next_id += 1
            x += panel.width
        y += PANEL_HEIGHT
    return out


def query_variable(name: str, label: str, query: str) -> dict:
    """A multi-select template variable filled from ``label_values(...)``, defaulting to All."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard(uid: str, title: str, description: str, rows: list[Row], variables: list[dict]) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["chassis"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [],
        "panels": _layout(rows),
    }


def expressions(board: dict) -> list[str]:
    """Every PromQL expression a dashboard runs (panel targets and variable queries)."""
    found = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    found += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return found
