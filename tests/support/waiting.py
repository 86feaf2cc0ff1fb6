"""Wait for a condition that another thread or process makes true.

The deadline is generous on purpose: it only bounds how long a broken test hangs. A test never
relies on it to let something happen; it waits for the event itself and fails with ``what``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 60.0
POLL_S = 0.05


def wait_until(condition: Callable[[], T], what: str, timeout: float = DEADLINE_S, poll: float = POLL_S) -> T:
    """The first truthy value of ``condition()``; AssertionError naming ``what`` at the deadline."""
    for value in _checks(condition, what, timeout):
        if value:
            return value
        time.sleep(poll)


async def async_wait_until(
    condition: Callable[[], T], what: str, timeout: float = DEADLINE_S, poll: float = POLL_S
) -> T:
    """``wait_until`` for a condition that tasks on the running event loop make true."""
    for value in _checks(condition, what, timeout):
        if value:
            return value
        await asyncio.sleep(poll)


def _checks(condition: Callable[[], T], what: str, timeout: float) -> Iterator[T]:
    """``condition()`` once per pull; AssertionError naming ``what`` once the deadline has passed."""
    deadline = time.monotonic() + timeout
    while True:
        yield condition()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
