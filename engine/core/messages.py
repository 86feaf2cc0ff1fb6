"""What crosses the two pipes between the server (front end) and the engine-core process.

Transport: ``multiprocessing`` pipes from the spawn context, carrying pickled objects. Both ends are
the same Python program, so ``SamplingParams``, ``Logprob``, ``EngineStats`` and exceptions cross
as they are, with no schema to keep in step (pyzmq + msgpack would need an encoder for each); there
is one reader and one writer per direction, so a socket pair is all the routing needed; and a peer's
death is an EOF on the pipe the moment it happens, which is how each side notices the other die.
``engine.executor.tensor_parallel`` talks to its ranks the same way.

Outputs cross as deltas: the front end knows each prompt and accumulates the generated ids and
text itself, so a step's message does not grow with the length of the sequences.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from engine.outputs import EngineStats, Logprob, RequestOutput
from engine.sampling.params import SamplingParams

# A KV event log change as the core made it: ("stored" | "removed" | "cleared", raw block hashes,
# the tier: "device", "host", "disk" or "shared").
KVChange = tuple[str, list[bytes], str]


# -- front end -> core (the drive loop's commands, in whichever process it runs) --------------------
class AddRequest(NamedTuple):
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    cache_salt: str | None
    arrival_time: float  # time.monotonic() in the front end: the clock is system-wide
    final_only: bool = False  # only the finished output is wanted (``LLM.generate``)


class AbortRequest(NamedTuple):
    request_id: str


class Stop(NamedTuple):
    """Finish nothing more: stop the tensor-parallel ranks and exit 0."""


# -- core -> front end ---------------------------------------------------------------------------
class CoreReady(NamedTuple):
    pid: int
    max_model_len: int
    stats: EngineStats
    kv_changes: list[KVChange]


class LoadFailed(NamedTuple):
    error: BaseException  # the exception EngineCore raised (or a RuntimeError quoting it)


class CoreFatal(NamedTuple):
    """The core cannot go on (its loop crashed, a tensor-parallel rank died); it exits next."""

    reason: str


class OutputDelta(NamedTuple):
    request_id: str
    new_token_ids: list[int]
    new_text: str
    new_logprobs: list[Logprob] | None
    finish_reason: str | None  # set once finished
    stop_reason: int | str | None
    num_cached_tokens: int
    first_scheduled_time: float | None
    first_token_time: float | None
    finished_time: float | None


class OutputBatch(NamedTuple):
    """Everything one turn of the core's loop produced, sent as one message."""

    outputs: list[OutputDelta]
    errors: list[tuple[str, str]]  # (request id, why it was refused), raised as ValueError
    kv_changes: list[KVChange]
    stats: EngineStats


def to_delta(out: RequestOutput) -> OutputDelta:
    m = out.metrics
    return OutputDelta(
        out.request_id,
        out.new_token_ids,
        out.new_text,
        out.new_logprobs,
        out.finish_reason if out.finished else None,
        out.stop_reason,
        out.num_cached_tokens,
        m.first_scheduled_time,
        m.first_token_time,
        m.finished_time,
    )


def picklable(error: BaseException) -> Any:
    """``error`` if it survives a round trip through pickle, else a RuntimeError quoting it."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
