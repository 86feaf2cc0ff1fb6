"""Two read-then-write transactions at once on the control plane's embedded SQLite database, each
in its own thread and Django connection, and a third connection looking on; prints what happened as
JSON. Run as a program (python -m tests.support.sqlite_writers) with DATABASE_URL unset and
CHASSIS_VAR_DIR naming an empty folder, so that the settings choose SQLite on their own."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from pathlib import Path

from tests.support.waiting import DEADLINE_S


def main() -> dict:
    sys.path.append(str(Path(__file__).resolve().parents[2] / "platform"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from django.db import connection, connections, transaction

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)")
        cursor.execute("INSERT INTO counter VALUES (1, 0)")
        cursor.execute("PRAGMA journal_mode")
        journal_mode = cursor.fetchone()[0]
    path = connection.settings_dict["NAME"]
    first_read, first_may_write, second_starts = threading.Event(), threading.Event(), threading.Event()
    errors: list[str] = []

    def increment(read: threading.Event | None = None, may_write: threading.Event | None = None) -> None:
        """The read-modify-write of a get-then-save (get_or_create, a row's counter)."""
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT n FROM counter WHERE id = 1")
                n = cursor.fetchone()[0]
                if read is not None:
                    read.set()
                    may_write.wait(DEADLINE_S)
                cursor.execute("UPDATE counter SET n = %s WHERE id = 1", [n + 1])
        except Exception as error:  # noqa: BLE001 - reported, the caller asserts on it
            errors.append(repr(error))
        finally:
            connections.close_all()

    first = threading.Thread(target=increment, args=(first_read, first_may_write))
    first.start()
    first_read.wait(DEADLINE_S)
    # While the first transaction is open, another connection can read, but not take the write lock.
    onlooker = sqlite3.connect(path, timeout=0, isolation_level=None)
    seen = onlooker.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]
    try:
        onlooker.execute("BEGIN IMMEDIATE")
        onlooker.execute("ROLLBACK")
        write_lock_held = False
    except sqlite3.OperationalError:
        write_lock_held = True

    def second_increment() -> None:
        second_starts.set()
        increment()

    second = threading.Thread(target=second_increment)
    second.start()
    second_starts.wait(DEADLINE_S)
    first_may_write.set()
    first.join(DEADLINE_S)
    second.join(DEADLINE_S)
    counter = onlooker.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]
    onlooker.close()
    return {
        "journal_mode": journal_mode,
        "read_beside_the_open_transaction": seen,
        "write_lock_held_by_the_open_transaction": write_lock_held,
        "counter": counter,
        "errors": errors,
    }


if __name__ == "__main__":
    print(json.dumps(main()))
