"""What one server process knows: settings, the engine once loaded, readiness, metrics, stores."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.clients.protocol import EngineClient
from engine.outputs import EngineStats
from engine.server.api.common import TokenText
from engine.server.api.response_store import ResponseStore
from engine.server.conversation import Conversation
from engine.server.errors import APIError, bad_request
from engine.server.metrics import ServerMetrics
from engine.server.reasoning import ReasoningStyle, detect_style
from engine.server.tool_parsers import PARSERS, ToolParser, call_format, detect_parser

log = logging.getLogger("chassis.server")


@dataclass
class ServeSettings:
    served_model_names: list[str]
    model_dir: str = ""
    api_key: str | None = None
    tool_parser: str = "auto"
    replica_id: str = ""
    block_size: int = 16
    response_store_size: int = 1024
    engine_config: dict = field(default_factory=dict)  # the resolved EngineConfig, for /version


class ServerState:
    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.model_name = settings.served_model_names[0]
        self.engine: EngineClient | None = None
        self.ready = False
        self.draining = False
        self.load_error: str | None = None
        self.metrics = ServerMetrics(
            self.model_name,
            self.engine_stats,
            settings.engine_config.get("max_model_len"),
            batch_invariant=self.batch_invariant,
            accelerators=(settings.engine_config.get("tensor_parallel_size") or 1)
            * (settings.engine_config.get("expert_parallel_size") or 1),
            accelerator_hour_price=settings.engine_config.get("accelerator_hour_price") or 0.0,
        )
        self.responses = ResponseStore(settings.response_store_size)
        self.parser_cls: type[ToolParser] | None = None
        self.tool_call_format = "hermes"  # the layout forced and strict calls take (tool_parsers.call_format)
        self.token_text: TokenText | None = None
        self.reasoning: ReasoningStyle | None = None  # the checkpoint's reasoning format, if it reasons
        self.on_fatal: Callable[[], None] | None = None  # set by the CLI: stop the process

    @property
    def batch_invariant(self) -> bool:
        """Whether the engine runs in batch-invariant mode (``EngineConfig.batch_invariant``)."""
        return bool(self.settings.engine_config.get("batch_invariant", False))

    @property
    def engine_pid(self) -> int | None:
        """The process the engine core runs in: a child of this one, or this one (engine in a thread)."""
        if self.engine is None:
            return None
        return self.engine.pid or os.getpid()

    def engine_stats(self) -> EngineStats | None:
        return self.engine.stats() if self.ready and self.engine is not None else None

    async def load(self, factory: Callable[[], Awaitable[EngineClient]]) -> None:
        try:
            engine = await factory()
        except Exception as exc:
            log.exception("engine failed to load")
            self.load_error = f"{type(exc).__name__}: {exc}"
            if self.on_fatal is not None:
                self.on_fatal()
            return
        self.attach(engine)

    def attach(self, engine: EngineClient) -> None:
        self.engine = engine
        tokenizer = engine.tokenizer
        name = self.settings.tool_parser
        if name == "auto":
            name = detect_parser(_vocab(tokenizer), _model_type(self.settings.model_dir))
        self.parser_cls = PARSERS[name]
        self.token_text = TokenText(tokenizer)
        template = getattr(getattr(tokenizer, "hf", None), "chat_template", None)
        self.tool_call_format = call_format(name, template)
        self.reasoning = detect_style(template)
        # A grammar waits for the end of the reasoning only when the end marker is one token.
        self.reasoning_end_token = self.reasoning is not None and self.reasoning.end_marker in _vocab(
            tokenizer
        )
        self.ready = True
        reasoning = self.reasoning.name if self.reasoning else "none"
        log.info("engine ready: %s (tool parser %s, reasoning %s)", self.model_name, name, reasoning)

    def admit(self) -> EngineClient:
        """The engine, if a new request may start now; otherwise a 503 saying why."""
        if self.draining:
            raise APIError(
                503, "This replica is draining and accepts no new requests; retry on another replica."
            )
        if self.load_error:
            raise APIError(503, f"The model failed to load: {self.load_error}")
        if not self.ready:
            raise APIError(503, "The model is still loading; retry shortly.")
        return self.engine

    def apply_thinking(self, conversation: Conversation, wanted: bool | None, param: str) -> bool:
        """Set the chat template's thinking switch as a request's reasoning control asks (None: left
        as the template's default) and say whether the request thinks; a 400 naming the control when
        the template has no switch that could honour it."""
        style = self.reasoning
        if wanted is not None:
            fixed = style is not None and style.switch is None
            if style is None and wanted:
                raise bad_request(
                    f"{param}: this model does not reason (its chat template has no thinking block).",
                    param=param,
                )
            if fixed and not wanted:
                raise bad_request(
                    f"{param}: this model always reasons; its chat template has no thinking switch.",
                    param=param,
                )
            if style is not None and style.switch is not None:
                conversation.template_kwargs[style.switch] = wanted
        return style is not None and style.thinking_on(conversation.template_kwargs)

    def render(self, conversation: Conversation, param: str, add_generation_prompt: bool = True) -> list[int]:
        """Prompt token ids through the checkpoint's chat template (control-token-safe encoding)."""
        if not conversation.messages:
            raise bad_request(f"The conversation is empty: '{param}' holds no message.", param=param)
        try:
            return conversation.encode(self.engine.tokenizer, add_generation_prompt)
        except Exception as exc:  # template errors (role order, missing fields) are the caller's to fix
            raise bad_request(f"The chat template rejected the conversation: {exc}", param=param) from exc


def _vocab(tokenizer: Any) -> dict[str, int]:
    hf = getattr(tokenizer, "hf", None)
    try:
        return dict(hf.get_vocab()) if hf is not None else {}
    except Exception:  # a tokenizer without a vocabulary view: fall back to the model type
        return {}


def _model_type(model_dir: str) -> str:
    try:
        return str(json.loads((Path(model_dir) / "config.json").read_text()).get("model_type", ""))
    except (OSError, ValueError):
        return ""
