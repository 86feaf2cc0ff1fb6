"""``EngineClient``: what the HTTP server (and anything else serving requests) needs of an engine.

Three implementations, one contract (``tests/engine/clients/test_engine_client_contract.py``):

- ``SubprocessEngineClient``: the engine core in a child process (what ``chassis serve`` runs).
- ``InThreadEngineClient`` (public name ``engine.AsyncLLMEngine``): the core in a thread of this
  process.
- ``LLM.client`` (an ``InlineEngineClient``): the offline ``LLM``'s core, stepped by the caller's
  event loop itself.

The server depends on this Protocol only. Before ``start()`` only ``ready`` (False) may be read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from engine.kv.events import KVEventLog
    from engine.outputs import EngineStats, RequestOutput
    from engine.sampling.params import SamplingParams
    from engine.tokenizer.tokenizer import Tokenizer


@runtime_checkable
class EngineClient(Protocol):
    @property
    def ready(self) -> bool:
        """True from a successful ``start()`` until ``shutdown()`` or the engine's death."""

    @property
    def pid(self) -> int | None:
        """The process the engine core runs in (this one, or a child)."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def kv_events(self) -> KVEventLog:
        """The prefix cache's stored/removed events, numbered as the core numbers them."""

    async def start(self) -> None:
        """Load the model; raises what loading raised."""

    async def shutdown(self) -> None:
        """Stop the engine; every stream still open ends with ``EngineDeadError``."""

    def generate(
        self,
        prompt: str | list[int],  # text (tokenized with the checkpoint's tokenizer) or token ids
        params: SamplingParams,
        request_id: str | None = None,  # None: a fresh unique id
        cache_salt: str | None = None,  # prefix-cache hits only between requests with the same salt
    ) -> AsyncIterator[RequestOutput]:
        """Admit one request now: ``ValueError`` for a prompt the engine cannot serve or an id in use,
        ``EngineDeadError`` when not running. Its outputs are deltas (each also carries the totals);
        the last has ``finished``. Leaving the iterator early aborts the request."""

    async def abort(self, request_id: str) -> None:
        """End the request: its stream gets a last output with finish reason "abort"."""

    def stats(self) -> EngineStats:
        """Counts as of the core's latest turn (running, waiting, KV blocks, tokens)."""
