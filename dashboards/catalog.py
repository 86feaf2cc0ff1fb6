"""Every Chassis dashboard, and their deterministic JSON form."""

from __future__ import annotations

import json
from pathlib import Path

from dashboards import control_plane_dashboard, engine_dashboard, gateway_dashboard

BUILDERS = (engine_dashboard.build, gateway_dashboard.build, control_plane_dashboard.build)


def all_dashboards() -> list[dict]:
    return [build() for build in BUILDERS]


def to_json(board: dict) -> str:
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


def export(out_dir: Path) -> list[Path]:
    """Write ``<uid>.json`` for each dashboard (Grafana's import format); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for board in all_dashboards():
        path = out_dir / f"{board['uid']}.json"
        path.write_text(to_json(board), encoding="utf-8")
        written.append(path)
    return written
