"""Timing knobs of the serving machinery, read from settings (which read the environment)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings


def setting(name: str) -> float:
    return float(settings.CHASSIS_SERVING[name])


def relaunch_backoff(attempts: int) -> timedelta:
    """Exponential: base, 2*base, 4*base, ... capped."""
    seconds = setting("RELAUNCH_BACKOFF_S") * 2 ** max(attempts - 1, 0)
    return timedelta(seconds=min(seconds, setting("RELAUNCH_BACKOFF_MAX_S")))


def give_up_after() -> int:
    """Identical failures in a row after which a replica is no longer relaunched (0: never)."""
    return int(setting("RELAUNCH_GIVE_UP_AFTER"))
