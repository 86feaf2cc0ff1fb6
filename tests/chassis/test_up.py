"""`chassis up` on embedded defaults (SQLite, filesystem broker) brings the control plane up."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.ports import free_port
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _admin_token(up: subprocess.Popen, env: dict, log: Path) -> str | None:
    assert up.poll() is None, log.read_text()[-4000:]
    made = subprocess.run(
        [sys.executable, "manage.py", "create_api_token", "admin", "--role", "admin"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return made.stdout.strip().split()[-1] if made.returncode == 0 else None


def _ready_replica(port: int, token: str) -> dict | None:
    try:
        response = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/replicas/",
            params={"state": "ready"},
            headers={"Authorization": f"Bearer {token}"},
        )
    except httpx.ConnectError:  # the web server is still starting
        return None
    if response.status_code == 200 and response.json()["results"]:
        return response.json()["results"][0]
    return None


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


@pytest.mark.timeout(600)  # the replica wait below may take 420 s on a loaded CI machine
def test_up_serves_the_demo_replica(tmp_path):
    """A new user's first minutes: `chassis up` alone ends with a ready SmolLM2 replica that knows the
    capital of France, directly and through the gateway (the README's curl).

    The replica is `chassis serve <the SmolLM2 .gguf file> --served-model-name smollm2-chat` (the
    launcher's command for the demo checkpoint), and it checks the model name of every request: this
    is the suite's test of serving a GGUF checkpoint over the OpenAI API. --api-key is checked on the
    tiny replica (tests/engine/server/test_server_errors.py), whatever the checkpoint's format."""
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
        log = tmp_path / "up.log"
        token = wait_until(
            lambda: _admin_token(up, env, log), "the control plane's database", timeout=180, poll=2
        )
        replica = wait_until(
            lambda: _ready_replica(port, token), "a ready replica in the control plane", timeout=420, poll=2
        )
        chat = httpx.post(
            f"{replica['url']}/v1/chat/completions",
            json={
                "model": replica["served_model_name"],
                "messages": QUESTION,
                "max_tokens": 24,
                "temperature": 0,
            },
            timeout=60,
        )
        assert chat.status_code == 200, chat.text
        assert replica["served_model_name"] == "smollm2-chat"
        assert "Paris" in chat.json()["choices"][0]["message"]["content"]
        # The same model through the gateway, which learns the replica from the control plane.
        from openai import OpenAI

        client = OpenAI(base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="unused", max_retries=0)

        def gateway_reply():
            try:
                return client.chat.completions.create(
                    model=replica["served_model_name"],
                    messages=QUESTION,
                    max_tokens=24,
                    temperature=0,
                )
            except Exception:  # the gateway refreshes its replica list every few seconds
                return None

        reply = wait_until(gateway_reply, "the gateway to route to the replica", timeout=60, poll=1)
        assert "Paris" in reply.choices[0].message.content
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(60)
    # Stopping `chassis up` stops the engines it launched too. The engine's process is what is checked:
    # its port (8100 on) may already serve another test's replica, launched by the same agent code.
    engine = replica["pid"]
    assert engine and not (psutil.pid_exists(engine) and psutil.Process(engine).status() != psutil.STATUS_ZOMBIE)
    assert f"engine pid {engine} " in (tmp_path / "up.log").read_text()
