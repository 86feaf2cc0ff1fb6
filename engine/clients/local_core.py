"""What the clients whose ``EngineCore`` lives in this process share: read-only views of the core,
the prompt limits admission checks, and the end of every stream when the drive loop crashes."""

from __future__ import annotations

import logging
import os

from engine.clients.admission import AdmittingClient, PromptLimits, started
from engine.clients.request_stream import EngineDeadError
from engine.core.engine_core import EngineCore
from engine.kv.events import KVEventLog
from engine.outputs import EngineStats
from engine.tokenizer.tokenizer import Tokenizer

logger = logging.getLogger(__name__)


class LocalCoreClient(AdmittingClient):
    _core: EngineCore | None = None

    @property
    def core(self) -> EngineCore:
        return started(self._core)

    @property
    def pid(self) -> int:
        return os.getpid()

    @property
    def tokenizer(self) -> Tokenizer:
        return self.core.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.core.max_model_len

    @property
    def kv_events(self) -> KVEventLog:
        return self.core.kv_events

    def stats(self) -> EngineStats:
        return self.core.stats()

    def _prompt_limits(self) -> PromptLimits:
        core = self.core
        return PromptLimits(core.tokenizer, core.model_config.vocab_size, core.max_model_len)

    def _crashed(self, exc: BaseException) -> None:
        """The drive loop raised: the engine is dead, and every open stream must hear about it."""
        logger.error("engine loop crashed", exc_info=exc)
        reason = f"engine loop crashed: {exc!r}"
        self._admission.close(reason)
        self._admission.fail_all(EngineDeadError(reason))
