"""Per-worker Redis databases when the suite runs under pytest-xdist (`make test` does).

Loaded with ``-p`` (pyproject's addopts), so it runs before Django reads its settings. Celery
workers that tests start consume whatever reaches their broker: two xdist workers on the same Redis
database would take each other's tasks, so worker gwN gets databases 10+2N (broker) and 11+2N
(results), a range no test names itself. PostgreSQL needs nothing here: pytest-django already gives
each xdist worker its own test database.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

FIRST_DB = 10


def _with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def _isolate_redis() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    broker_db = FIRST_DB + 2 * int(worker[2:])
    if broker_db + 1 > 15:  # a default Redis has databases 0-15
        raise RuntimeError(f"{worker}: at most 3 xdist workers get their own Redis databases")
    for name, db in (("CELERY_BROKER_URL", broker_db), ("CELERY_RESULT_BACKEND", broker_db + 1)):
        url = os.environ.get(name, "")
        if url.startswith(("redis://", "rediss://")):
            os.environ[name] = _with_db(url, db)


_isolate_redis()
