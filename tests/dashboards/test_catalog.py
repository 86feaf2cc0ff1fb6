"""The dashboards' JSON: valid, complete, laid out on Grafana's grid, and byte-for-byte deterministic."""

from __future__ import annotations

import json
import subprocess
import sys

from dashboards.catalog import all_dashboards, to_json
from dashboards.panels import DATASOURCE_UID, GRID_WIDTH

REQUIRED_PANELS = {
    "chassis-engine": [
        "Time to first token (p50 / p99)", "Inter-token latency (p50 / p99)", "Output tokens/s",
        "Prompt tokens/s", "Prefix-cache hit rate", "KV-cache usage", "Running requests",
        "Waiting requests", "Preemptions/s",
    ],
    "chassis-gateway": [
        "Requests/s by replica", "Requests/s by policy", "Routing decision time (p50 / p99)",
        "Upstream errors/s by replica and kind", "Retries/s",
    ],
    "chassis-control-plane": [
        "Requests/s by view", "Responses/s by status", "Request time by view (p50 / p99)", "Queries/s",
        "Query time (p50 / p99)", "Tasks/s by task and outcome", "Task run time by task (p50 / p95)",
        "Queue length by queue",
    ],
}  # fmt: skip


def test_every_required_panel_is_there_with_a_query():
    boards = {b["uid"]: b for b in all_dashboards()}
    assert set(boards) == set(REQUIRED_PANELS)
    for uid, titles in REQUIRED_PANELS.items():
        panels = {p["title"]: p for p in boards[uid]["panels"] if p["type"] != "row"}
        for title in titles:
            assert title in panels, f"{uid} lacks {title!r}"
            assert panels[title]["targets"] and all(t["expr"] for t in panels[title]["targets"])
    ttft = next(p for p in boards["chassis-engine"]["panels"] if p["title"].startswith("Time to first"))
    assert [t["expr"].split(",")[0] for t in ttft["targets"]] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.99",
    ]


def test_panels_fit_the_grid_with_unique_ids_and_the_chassis_data_source():
    for board in all_dashboards():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        occupied = set()
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert 0 <= pos["x"] and pos["x"] + pos["w"] <= GRID_WIDTH
            cells = {
                (x, y)
                for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])
            }
            assert not cells & occupied, f"{panel['title']} overlaps another panel"
            occupied |= cells
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == DATASOURCE_UID
                refs = [t["refId"] for t in panel["targets"]]
                assert len(refs) == len(set(refs))


def test_json_is_valid_and_deterministic(tmp_path):
    first = [to_json(b) for b in all_dashboards()]
    assert first == [to_json(b) for b in all_dashboards()]
    for text in first:
        assert json.loads(text)["schemaVersion"] >= 36

    # The CLI writes the same bytes, twice over.
    for out in (tmp_path / "a", tmp_path / "b"):
        result = subprocess.run(
            [sys.executable, "-m", "chassis", "dashboards", "export", str(out)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["chassis-control-plane.json", "chassis-engine.json", "chassis-gateway.json"]
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert sorted((tmp_path / "a" / n).read_text() for n in files) == sorted(first)
