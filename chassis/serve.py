"""``chassis serve``: one engine replica over HTTP (OpenAI, Anthropic and Responses APIs)."""

from __future__ import annotations

import argparse
from pathlib import Path

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
HELP = "Serve one checkpoint over HTTP (OpenAI, Anthropic and Responses APIs, /health, /metrics)."

TOOL_PARSERS = ("auto", "hermes", "llama3", "deepseek")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model_dir", metavar="MODEL_DIR", help="checkpoint directory (config.json, safetensors, tokenizer)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8100, help="port to bind (default: %(default)s)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "npu"])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument(
        "--served-model-name", default=None, help="model name clients send (default: the directory name)"
    )
    parser.add_argument(
        "--api-key", default=None, help="require this key (Bearer, or x-api-key on /v1/messages)"
    )
    parser.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tensor_parallel_size",
        type=int,
        default=1,
        help="ranks (accelerators) one replica spans; one process per rank (default: %(default)s)",
    )
    parser.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="most sequences in one batch")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048, help="token budget of one step")
    parser.add_argument(
        "--max-model-len", type=int, default=None, help="context length (default: the checkpoint's)"
    )
    parser.add_argument(
        "--num-gpu-blocks", type=int, default=None, help="KV blocks (default: sized from memory)"
    )
    parser.add_argument(
        "--load-format",
        default="auto",
        choices=["auto", "dummy"],
        help="dummy: random weights (benchmarks of a config-only directory) (default: %(default)s)",
    )
    parser.add_argument("--no-prefix-caching", action="store_true", help="disable the prefix cache")
    parser.add_argument(
        "--tool-parser", default="auto", choices=TOOL_PARSERS, help="tool-call format of the model"
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds to finish in-flight requests on SIGTERM"
    )
    parser.add_argument("--kv-event-capacity", type=int, default=10_000, help="KV events kept for /kv/events")
    parser.add_argument("--replica-id", default="", help="name reported in /health and the KV event feed")
    parser.add_argument(
        "--engine-in-thread",
        action="store_true",
        help="run the engine core in a thread of the server process instead of a child process "
        "(one process to profile; HTTP work and engine steps then share one GIL)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    import prometheus_client
    import uvicorn

    from engine.config import EngineConfig
    from engine.server.app import create_app
    from engine.server.engine_failure import replica_ender
    from engine.server.state import ServeSettings
    from engine.server.uvicorn_server import DrainingServer

    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").is_file():
        print(f"chassis serve: {model_dir} is not a checkpoint directory (no config.json)")
        return 2
    try:
        config = EngineConfig(
            model_dir=model_dir,
            device=args.device,
            dtype=args.dtype,
            block_size=args.block_size,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_model_len=args.max_model_len,
            num_gpu_blocks=args.num_gpu_blocks,
            enable_prefix_caching=not args.no_prefix_caching,
            kv_event_capacity=args.kv_event_capacity,
            tensor_parallel_size=args.tensor_parallel_size,
            load_format=args.load_format,
        )
    except ValueError as exc:
        print(f"chassis serve: {exc}")
        return 2
    settings = ServeSettings(
        served_model_names=[args.served_model_name or model_dir.resolve().name],
        model_dir=str(model_dir),
        api_key=args.api_key,
        tool_parser=args.tool_parser,
        replica_id=args.replica_id,
        block_size=args.block_size,
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
