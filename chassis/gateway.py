"""``chassis gateway``: the load balancer in front of a deployment's replicas."""

from __future__ import annotations

import argparse
import logging
import sys

from chassis.arguments import add_token_argument

HELP = "Route OpenAI/Anthropic API requests across engine replicas (cache-aware, least-load, round-robin, session)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: %(default)s)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config", metavar="FILE", help="static config (JSON or YAML): models -> policy + replicas"
    )
    source.add_argument(
        "--control-plane", metavar="URL", help="control plane base URL, e.g. http://127.0.0.1:8000"
    )
    add_token_argument(parser, "CHASSIS_API_TOKEN", "bearer token for the control plane API")
    parser.add_argument(
        "--settings",
        metavar="FILE",
        help="with --control-plane: a config file for timeouts/intervals/breaker (its 'models' are ignored)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the gateway's log level (default: %(default)s)",
    )


def load_tokenizer(path: str):
    """The engine's own tokenizer for a checkpoint dir, so prompts render exactly as on the replica."""
    from engine.tokenizer import Tokenizer

    return Tokenizer(path)


def safe_tokenizer_factory(path: str):
    try:
        return load_tokenizer(path)
    except Exception as exc:  # routing still works by load without a tokenizer
        logging.getLogger("gateway").warning(
            "cannot load tokenizer from %s (%s): cache_aware falls back to load-only routing", path, exc
        )
        return None


def build_gateway(args: argparse.Namespace):
    from gateway.config import load_config_file, parse_config
    from gateway.service import Gateway
    from gateway.sources import ControlPlaneSource, StaticSource

    if args.config:
        config = load_config_file(args.config)
        return Gateway(config, StaticSource(config.models), tokenizer_factory=safe_tokenizer_factory)
    if args.settings:
        config = load_config_file(args.settings, require_models=False)
    else:
        config = parse_config({}, require_models=False)
    import httpx

    source = ControlPlaneSource(args.control_plane, args.token, httpx.AsyncClient(timeout=5.0))
    return Gateway(config, source, tokenizer_factory=safe_tokenizer_factory)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import build_app
    from gateway.config import ConfigError

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.control_plane and not args.control_plane.startswith(("http://", "https://")):
        print(f"error: --control-plane must be an http(s) URL, got {args.control_plane!r}", file=sys.stderr)
        return 2
    try:
        gateway = build_gateway(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(build_app(gateway), host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0
