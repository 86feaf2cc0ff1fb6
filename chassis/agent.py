"""``chassis agent --node NAME``: this machine's node agent.

It registers the node, its accelerators and the engine devices it can drive (``cpu``; ``cuda`` when
torch sees a GPU; ``npu`` when torch_npu imports and sees an NPU: placement sends no replica to a
node that cannot run it) with the control plane, then runs a Celery worker on the node's own queue
(``node.<name>``), where launch and drain tasks for its replicas arrive. A heartbeat
thread reports the accelerators again every few seconds and notices engine processes that died.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
import threading
from pathlib import Path

HELP = "Run the node agent: register this node, report its accelerators, launch and drain its replicas."
_NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
log = logging.getLogger("chassis.agent")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", required=True, help="node name (lowercase letters, digits, dashes)")
    parser.add_argument(
        "--address",
        default="127.0.0.1",
        help="address replicas bind and are reached at (default: %(default)s)",
    )
    parser.add_argument("--cluster", default="default", help="cluster name (default: %(default)s)")
    parser.add_argument(
        "--domain", default=None, help="scale-up domain (NVLink/HCCS island); default: the node name"
    )
    parser.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="node label (repeatable)"
    )
    parser.add_argument(
        "--heartbeat", type=float, default=5.0, help="seconds between heartbeats (default: %(default)s)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="tasks run at once (default: %(default)s)")
    parser.add_argument("--loglevel", default="INFO", help="Celery log level (default: %(default)s)")


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--label {pair!r} is not KEY=VALUE")
        labels[key] = value
    return labels


def _heartbeat_loop(node_name: str, interval: float, stop: threading.Event) -> None:
    from controlplane.fleet.inventory import probe_accelerators
    from controlplane.fleet.models import Node
    from controlplane.fleet.services import heartbeat
    from controlplane.serving.execution import observe_node
    from django.db import connection

    while not stop.wait(interval):
        try:
            node = Node.objects.get(name=node_name)
            heartbeat(node, probe_accelerators())
            observe_node(node)
        except Exception:  # keep beating through database blips; say what happened
            log.exception("heartbeat of node %s failed", node_name)
        finally:
            connection.close()


def run(args: argparse.Namespace) -> int:
    if not _NODE_NAME.match(args.node):
        print(f"agent: --node {args.node!r} must be lowercase letters, digits and dashes", file=sys.stderr)
        return 2
    if args.heartbeat <= 0 or args.concurrency < 1:
        print("agent: --heartbeat must be positive and --concurrency at least 1", file=sys.stderr)
        return 2
    try:
        labels = _labels(args.label)
    except ValueError as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 2
    platform_dir = str(Path(__file__).resolve().parents[1] / "platform")
    if platform_dir not in sys.path:
        sys.path.append(platform_dir)  # append: a prepended `platform` folder would shadow the stdlib
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from controlplane.celery import app
    from controlplane.fleet.inventory import probe_accelerators
    from controlplane.fleet.services import register_node
    from django.db import connection

    from engine.device_runtime import drivable_devices

    accelerators = probe_accelerators()
    runtimes = drivable_devices()
    node = register_node(
        args.node, hostname=socket.gethostname(), address=args.address, cluster=args.cluster,
        domain=args.domain, labels=labels, accelerators=accelerators, runtimes=runtimes,
    )  # fmt: skip
    connection.close()
    print(
        f"agent: node {node.name} registered with {len(accelerators)} accelerator(s): "
        f"{', '.join(f'{a.vendor}:{a.index} {a.model}' for a in accelerators)}; "
        f"runtimes {', '.join(runtimes)}; queue {node.queue}",
        flush=True,
    )
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat_loop, args=(node.name, args.heartbeat, stop), daemon=True)
    beat.start()
    try:
        app.worker_main([
            "worker", "--queues", node.queue, "--hostname", f"agent-{node.name}@%h",
            "--pool", "threads", "--concurrency", str(args.concurrency), "--loglevel", args.loglevel,
            "--without-gossip", "--without-mingle",
        ])  # fmt: skip
    finally:
        stop.set()
    return 0
