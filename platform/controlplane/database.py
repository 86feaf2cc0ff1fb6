"""The control plane's database settings: DATABASE_URL, or the embedded SQLite file."""

from __future__ import annotations

from pathlib import Path

import dj_database_url

# The web process, the Celery worker, beat and the agent share the embedded SQLite file. A write
# transaction that began as a reader cannot wait for another writer (SQLite answers "database is
# locked" at once rather than risk a deadlock), and select_for_update() locks nothing there. So
# transactions take the write lock when they begin and wait for it, which serializes them as the
# row locks do on PostgreSQL; in WAL mode readers never wait for a writer, nor a writer for readers.
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL",
}


def database_settings(url: str | None, sqlite_path: Path, conn_max_age: int = 0) -> dict:
    """Django's settings for the default database: ``url`` (a DATABASE_URL) or, without one, SQLite
    at ``sqlite_path``; through django-prometheus' wrappers of the same backends, which count
    queries, errors and their durations."""
    settings = dj_database_url.parse(url or f"sqlite:///{sqlite_path}", conn_max_age=conn_max_age)
    settings["ENGINE"] = settings["ENGINE"].replace("django.db.backends.", "django_prometheus.db.backends.")
    if settings["ENGINE"].endswith(".sqlite3"):
        settings.setdefault("OPTIONS", {}).update(SQLITE_OPTIONS)
    return settings
