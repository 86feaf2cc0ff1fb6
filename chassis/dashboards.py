"""``chassis dashboards``: Grafana dashboards as code and Prometheus target discovery.

- ``export OUT_DIR``: write each dashboard's JSON (Grafana's import format).
- ``provision --grafana URL --token T``: create or update the Prometheus data source, the Chassis
  folder and the dashboards in a Grafana (idempotent: identity by uid).
- ``targets --control-plane URL --out DIR``: write Prometheus file_sd files for the ready replicas,
  the gateways and the control plane, once or every N seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from chassis.arguments import add_token_argument

HELP = "Grafana dashboards (export, provision into a Grafana) and Prometheus targets from the control plane."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    export = actions.add_parser("export", help="write the dashboards' JSON into a directory")
    export.add_argument(
        "out_dir", metavar="OUT_DIR", type=Path, help="folder the dashboards' JSON files go to"
    )

    provision = actions.add_parser(
        "provision", help="create/update the Prometheus data source and the dashboards in Grafana"
    )
    provision.add_argument(
        "--grafana", required=True, metavar="URL", help="Grafana base URL, e.g. http://127.0.0.1:3000"
    )
    add_token_argument(provision, "GRAFANA_TOKEN", "Grafana service-account token")
    provision.add_argument(
        "--prometheus-url",
        default="http://127.0.0.1:9090",
        help="Prometheus URL as Grafana's server reaches it (default: %(default)s)",
    )
    provision.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per API call (default: %(default)s)"
    )

    targets = actions.add_parser(
        "targets", help="write Prometheus file_sd target files from the control plane"
    )
    targets.add_argument("--control-plane", required=True, metavar="URL", help="e.g. http://127.0.0.1:8000")
    add_token_argument(targets, "CHASSIS_API_TOKEN", "control plane API token, viewer role is enough")
    targets.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="directory of the file_sd JSON files"
    )
    targets.add_argument(
        "--gateway",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a gateway to scrape (repeatable; default: 127.0.0.1:8080)",
    )
    targets.add_argument(
        "--every",
        type=float,
        default=0,
        metavar="SECONDS",
        help="keep refreshing at this interval (default: once)",
    )


def _is_http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _export(args: argparse.Namespace) -> int:
    from dashboards.catalog import export

    for path in export(args.out_dir):
        print(path)
    return 0


def _provision(args: argparse.Namespace) -> int:
    from dashboards.grafana_http import GrafanaError, GrafanaHTTP
    from dashboards.provision import provision

    if not _is_http_url(args.grafana) or not _is_http_url(args.prometheus_url):
        print("dashboards provision: --grafana and --prometheus-url must be http(s) URLs", file=sys.stderr)
        return 2
    if not args.token:
        print("dashboards provision: give --token or set GRAFANA_TOKEN", file=sys.stderr)
        return 2
    api = GrafanaHTTP(args.grafana, args.token, timeout=args.timeout)
    try:
        actions = provision(api, args.prometheus_url)
    except GrafanaError as exc:
        print(f"dashboards provision: {exc}", file=sys.stderr)
        return 1
    finally:
        api.close()
    for action in actions:
        print(action)
    return 0


def _targets(args: argparse.Namespace) -> int:
    from dashboards.targets import TargetsError, write_targets

    if not _is_http_url(args.control_plane):
        print("dashboards targets: --control-plane must be an http(s) URL", file=sys.stderr)
        return 2
    gateways = args.gateway or ["127.0.0.1:8080"]
    bad = [g for g in gateways if not urlsplit(f"//{g}").port]
    if bad or args.every < 0:
        print(f"dashboards targets: --gateway wants HOST:PORT ({bad}) and --every >= 0", file=sys.stderr)
        return 2
    while True:
        try:
            counts = write_targets(args.out, args.control_plane, args.token, gateways)
            print(", ".join(f"{name}: {n} target(s)" for name, n in counts.items()), flush=True)
            failed = False
        except TargetsError as exc:
            print(f"dashboards targets: {exc} (kept the last replicas file)", file=sys.stderr, flush=True)
            failed = True
        if args.every <= 0:
            return 1 if failed else 0
        time.sleep(args.every)


def run(args: argparse.Namespace) -> int:
    return {"export": _export, "provision": _provision, "targets": _targets}[args.action](args)
