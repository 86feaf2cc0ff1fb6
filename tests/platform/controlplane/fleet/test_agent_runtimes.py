"""A real `chassis agent` process reports the engine devices it can drive as its node's runtimes:
npu only where torch_npu imports and sees a device. "Present" puts a STUB torch_npu
(tests/support/stub_torch_npu) on the agent's path: no NPU or CANN runtime can exist here."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.platform.controlplane.e2e.stack import REPO, database_url
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
STUB_DIR = Path(__file__).resolve().parents[3] / "support" / "stub_torch_npu"


def reported_runtimes(redis_broker_url, tmp_path, extra_env: dict) -> list[str]:
    from controlplane.fleet.models import Node
    from django.db import connection

    node = f"rt-{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ, "DATABASE_URL": database_url(connection.settings_dict),
        "CELERY_BROKER_URL": redis_broker_url, "CHASSIS_VAR_DIR": str(tmp_path), **extra_env,
    }  # fmt: skip
    with open(tmp_path / f"{node}.log", "wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "chassis", "agent", "--node", node, "--heartbeat", "30"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_until(
            lambda: (
                Node.objects.filter(name=node, runtimes__isnull=False).exists() or agent.poll() is not None
            ),
            f"agent {node} registered",
            timeout=120,
        )
        assert agent.poll() is None, (tmp_path / f"{node}.log").read_text()
        return Node.objects.get(name=node).runtimes
    finally:
        agent.terminate()
        agent.wait(30)


def test_agent_reports_npu_only_with_the_runtime(redis_broker_url, tmp_path):
    import torch

    gpu = ["cuda"] if torch.cuda.is_available() else []
    assert reported_runtimes(redis_broker_url, tmp_path, {}) == ["cpu", *gpu]
    stub = {"PYTHONPATH": os.pathsep.join([str(STUB_DIR), os.environ.get("PYTHONPATH", "")])}
    assert reported_runtimes(redis_broker_url, tmp_path, stub) == ["cpu", *gpu, "npu"]
