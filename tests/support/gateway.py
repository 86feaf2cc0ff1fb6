"""An in-process gateway over static replicas, and the chat body the gateway tests send it."""

from __future__ import annotations

from gateway.app import build_app
from gateway.config import parse_config
from gateway.service import Gateway
from gateway.sources import StaticSource


def _tokenizer(path: str):
    from engine.tokenizer import Tokenizer

    return Tokenizer(path)


def start_gateway(serve, replicas, policy="round_robin", tokenizer=None, model="m", **settings):
    """(Gateway, its ServerThread) routing ``model`` to ``replicas``; ``serve`` starts an ASGI app
    (the fixture, or ``ServerThread(app).start``)."""
    route = {"policy": policy, "replicas": replicas, **({"tokenizer": str(tokenizer)} if tokenizer else {})}
    config = parse_config(
        {
            "models": {model: route},
            "health_interval_s": 0.2,
            "circuit_breaker": {"failure_threshold": 2, "min_eject_s": 0.2},
            **settings,
        }
    )
    gateway = Gateway(
        config, StaticSource(config.models), tokenizer_factory=_tokenizer if tokenizer else None
    )
    return gateway, serve(build_app(gateway))


def chat(stream=False, max_tokens=3, model="m"):
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
