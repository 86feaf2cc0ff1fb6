"""Suite-wide fixtures.

A test that needs PostgreSQL or Redis skips locally when the service is not configured, but FAILS
when the environment variable CI is set: CI must never pass by skipping real services.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

# Session fixtures every test directory shares (tiny checkpoints), registered once for the suite.
pytest_plugins = ["tests.support.checkpoints"]

# Without a GPU, Triton kernels run in Triton's interpreter. TRITON_INTERPRET is read when
# @triton.jit decorates a kernel, so it must be set before any test module imports kernels/
# (engine tests do, and they are collected before tests/kernels).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _engine_switches_back_to_defaults():
    """An engine built in a test sets the kernel and all-reduce modes of this process
    (engine/switches.py); the next test starts from the defaults again."""
    yield
    switches = sys.modules.get("engine.switches")
    if switches is not None:
        switches.Switches().apply()


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI requires this service: {reason}")
    pytest.skip(reason)


@pytest.fixture
def require_postgres(settings) -> None:
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        _missing(f"DATABASE_URL does not point at PostgreSQL (engine is {engine})")


@pytest.fixture
def redis_broker_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL", "")
    if not url.startswith("redis://"):
        _missing(f"CELERY_BROKER_URL does not point at Redis (it is {url or 'unset'})")
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        _missing(f"Redis at {url} is unreachable: {exc}")
    return url


@pytest.fixture
def promtool() -> str:
    import shutil

    path = shutil.which("promtool")
    if path is None:
        _missing("promtool is not installed (scripts/install-system-tools.sh installs it)")
    return path


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    import shutil

    path = shutil.which("prometheus")
    if path is None:
        _missing("the prometheus server is not installed (scripts/install-system-tools.sh installs it)")
    return path
