"""`chassis up` on embedded defaults (SQLite, filesystem broker) brings the control plane up."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def test_up_on_embedded_defaults_is_healthy_and_worker_answers(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
    }
    env["CHASSIS_VAR_DIR"] = str(tmp_path / "var")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chassis",
            "up",
            "--exit-when-ready",
            "--no-beat",
            "--no-agent",
            "--no-demo",
            "--no-gateway",
            "--port",
            str(free_port()),
            "--worker-concurrency",
            "1",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "database sqlite reachable, broker filesystem reachable" in result.stdout
    assert "Celery worker(s) answered ping" in result.stdout
    assert (tmp_path / "var" / "chassis.sqlite3").exists()


def test_up_serves_the_demo_replica(tmp_path):
    """A new user's first minute: `chassis up` alone ends with a ready replica answering chat."""
    import httpx

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
    }
    env["CHASSIS_VAR_DIR"] = str(tmp_path / "var")
    port, gateway_port = free_port(), free_port()
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chassis",
            "up",
            "--port",
            str(port),
            "--worker-concurrency",
            "1",
            "--gateway-port",
            str(gateway_port),
        ],
        cwd=REPO,
        env=env,
        stdout=(tmp_path / "up.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        token = None
        replica = None
        while time.monotonic() < deadline and replica is None:
            assert up.poll() is None, (tmp_path / "up.log").read_text()[-4000:]
            time.sleep(2)
            if token is None:
                made = subprocess.run(
                    [sys.executable, "manage.py", "create_api_token", "admin", "--role", "admin"],
                    cwd=REPO,
                    env=env,
                    capture_output=True,
                    text=True,
                )
                if made.returncode != 0:
                    continue
                token = made.stdout.strip().split()[-1]
            try:
                response = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/replicas/",
                    params={"state": "ready"},
                    headers={"Authorization": f"Bearer {token}"},
                )
            except httpx.ConnectError:  # the web server is still starting
                continue
            if response.status_code == 200 and response.json()["results"]:
                replica = response.json()["results"][0]
        assert replica is not None, (tmp_path / "up.log").read_text()[-4000:]
        chat = httpx.post(
            f"{replica['url']}/v1/chat/completions",
            json={
                "model": replica["served_model_name"],
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 4,
            },
            timeout=60,
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"
        # The same model through the gateway, which learns the replica from the control plane.
        from openai import OpenAI

        client = OpenAI(base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="unused", max_retries=0)
        reply = None
        while reply is None and time.monotonic() < deadline + 60:
            try:
                reply = client.chat.completions.create(
                    model=replica["served_model_name"],
                    messages=[{"role": "user", "content": "hello"}],
                    max_tokens=4,
                )
            except Exception:  # the gateway refreshes its replica list every few seconds
                time.sleep(1)
        assert reply is not None and reply.choices[0].message.role == "assistant"
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(60)
    # Stopping `chassis up` stops the engines it launched too: nothing answers at the replica's URL.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{replica['url']}/health", timeout=5)
