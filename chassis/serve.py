"""``chassis serve``: one engine replica over HTTP (OpenAI, Anthropic and Responses APIs)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.gguf_file import require_checkpoint
from engine.config_cli import add_engine_arguments, config_from_args
from engine.device_runtime import DeviceUnavailable

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
HELP = "Serve one checkpoint over HTTP (OpenAI, Anthropic and Responses APIs, /health, /metrics)."

TOOL_PARSERS = ("auto", "hermes", "llama3", "deepseek")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine's flags come from ``EngineConfig`` (``engine/config_cli.py``); the ones here are
    the server's own."""
    add_engine_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8100, help="port to bind (default: %(default)s)")
    parser.add_argument(
        "--served-model-name", default=None, help="model name clients send (default: the directory name)"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("CHASSIS_REPLICA_API_KEY") or None,
        help="require this key (Bearer, or x-api-key on /v1/messages) (default: $CHASSIS_REPLICA_API_KEY;"
        " a node agent's replicas inherit it)",
    )
    parser.add_argument(
        "--tool-parser", default="auto", choices=TOOL_PARSERS, help="tool-call format of the model"
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds to finish in-flight requests on SIGTERM"
    )
    parser.add_argument("--replica-id", default="", help="name reported in /health and the KV event feed")
    parser.add_argument(
        "--engine-in-thread",
        action="store_true",
        help="run the engine core in a thread of the server process instead of a child process "
        "(one process to profile; HTTP work and engine steps then share one GIL)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's and the engine's log level (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    import prometheus_client
    import uvicorn

    from engine.server.app import create_app
    from engine.server.engine_failure import replica_ender
    from engine.server.routes_version import engine_config_dict
    from engine.server.state import ServeSettings
    from engine.server.uvicorn_server import DrainingServer

    model_dir = Path(args.model_dir)
    try:
        gguf_file = require_checkpoint(model_dir)
    except CheckpointError as exc:
        print(f"chassis serve: {exc}", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args, model_dir=model_dir)
    except ValueError as exc:
        print(f"chassis serve: {exc}")
        return 2
    try:
        config.resolved_device()  # a device this host cannot drive is refused before anything loads
    except DeviceUnavailable as exc:
        print(f"chassis serve: {exc}", file=sys.stderr)
        return 2
    settings = ServeSettings(
        served_model_names=[args.served_model_name or _default_model_name(gguf_file or model_dir)],
        model_dir=str(model_dir),
        api_key=args.api_key,
        tool_parser=args.tool_parser,
        replica_id=args.replica_id,
        block_size=config.block_size,
        engine_config=engine_config_dict(config),
    )

    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    prometheus_client.disable_created_metrics()

    async def load_engine():  # called once the server runs (app and server exist by then)
        end_replica = replica_ender(app.state.server, server.request_exit)  # the engine is gone for good
        if args.engine_in_thread:
            from engine.clients.in_thread import InThreadEngineClient
            from engine.executor.tensor_parallel import set_rank_failure_handler

            set_rank_failure_handler(end_replica)
            engine = await asyncio.to_thread(InThreadEngineClient, config)  # weights load off the event loop
        else:
            from engine.clients.subprocess_client import SubprocessEngineClient

            engine = SubprocessEngineClient(config, on_death=end_replica, log_format=LOG_FORMAT)
        await engine.start()
        return engine

    app = create_app(settings, load_engine)
    server = DrainingServer(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            timeout_graceful_shutdown=max(1, int(args.drain_timeout)),
            access_log=False,
        ),
        app.state.server,
    )
    state = app.state.server
    state.on_fatal = server.request_exit
    server.run()
    return 1 if state.load_error else 0


def _default_model_name(checkpoint: Path) -> str:
    """A GGUF file's name without ``.gguf`` (also when a directory holds it), else the directory's."""
    return checkpoint.resolve().name.removesuffix(".gguf")
