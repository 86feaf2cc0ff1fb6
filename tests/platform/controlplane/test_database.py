"""The embedded SQLite database under the control plane's concurrent writers (web, worker, beat,
agent share one file): controlplane/database.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_concurrent_read_then_write_transactions_on_sqlite_both_commit(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["CHASSIS_VAR_DIR"] = str(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.sqlite_writers"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert (tmp_path / "chassis.sqlite3").exists()
    assert seen["errors"] == []
    assert seen["counter"] == 2  # neither increment lost
    # Each transaction takes the write lock when it begins, so none has to upgrade a read lock,
    # which SQLite refuses at once; readers go on beside it (WAL).
    assert seen["write_lock_held_by_the_open_transaction"] is True
    assert seen["read_beside_the_open_transaction"] == 0
    assert seen["journal_mode"] == "wal"


def test_a_database_url_is_used_as_given_through_the_counting_backends():
    from controlplane.database import database_settings

    settings = database_settings("postgres://u:p@db.example:5433/chassis", Path("/unused.sqlite3"), 60)
    assert settings["ENGINE"] == "django_prometheus.db.backends.postgresql"
    assert (settings["HOST"], settings["PORT"], settings["NAME"], settings["CONN_MAX_AGE"]) == (
        "db.example", 5433, "chassis", 60,
    )  # fmt: skip
    assert "transaction_mode" not in settings.get("OPTIONS", {})


def test_an_empty_database_url_means_the_embedded_sqlite_file(tmp_path):
    from controlplane.database import database_settings

    settings = database_settings("", tmp_path / "chassis.sqlite3")
    assert settings["ENGINE"] == "django_prometheus.db.backends.sqlite3"
    assert settings["NAME"] == str(tmp_path / "chassis.sqlite3")
    assert settings["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
