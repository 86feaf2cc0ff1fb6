"""Entry point of the ``chassis`` console script.

Each subcommand lives in its own module exposing ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``. Modules keep heavy imports (torch, Django) inside ``run`` so that
``chassis --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module; add a line here to register a new subcommand.
SUBCOMMANDS: dict[str, str] = {
    "up": "chassis.up",
    "make-tiny-model": "chassis.make_tiny_model",
    "serve": "chassis.serve",
    "gateway": "chassis.gateway",
    "agent": "chassis.agent",
    "bench": "chassis.bench",
    "dashboards": "chassis.dashboards",
}


def _available() -> dict[str, object]:
    modules = {}
    for name, module_name in SUBCOMMANDS.items():
        try:
            modules[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chassis",
        description="Chassis: operate LLM inference in production (control plane, engine, gateway).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _available().items():
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
