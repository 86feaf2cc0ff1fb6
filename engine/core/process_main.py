"""Entry point of the engine-core process (``multiprocessing`` spawn target).

It loads the model (and spawns tensor-parallel ranks 1..k-1, itself being rank 0), reports ready or
why it could not load, then runs the drive loop (``engine.core.drive_loop``) until the front end says
stop. It ignores SIGINT/SIGTERM, which reach the whole process group: the front end drains first,
then stops it. It exits on its own when the front end dies. When it cannot go on (its loop crashed,
a rank died) it tells the front end why, prints the reason to stderr (the server's log) and exits 1
at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection

from engine.config import EngineConfig
from engine.core.drive_loop import drive
from engine.core.gc_heap import freeze_startup_heap
from engine.core.kv_forwarding import ForwardingKVEventLog
from engine.core.messages import CoreFatal, CoreReady, LoadFailed, picklable
from engine.core.process_loop import BatchSender, CommandInbox, Outbox
from engine.executor.supervision import exit_when_orphaned

FATAL_EXIT_CODE = 1


def run_engine_core(
    config: EngineConfig, commands: Connection, outputs: Connection, log_level: int, log_format: str
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_when_orphaned()
    logging.basicConfig(level=log_level, format=log_format)
    outbox = Outbox(outputs)

    from engine.core.engine_core import EngineCore
    from engine.executor.tensor_parallel import RankFailure, set_rank_failure_handler

    # A dead rank: the executor has killed the others and names the rank; this process must end so
    # the server ends (its watchdog thread calls this, possibly while the loop is stuck in a step).
    set_rank_failure_handler(lambda reason: _die(outbox, reason))
    kv_log = ForwardingKVEventLog(config.kv_event_capacity)
    try:
        _leave_a_core_to_the_front_end(config)
        core = EngineCore(config, kv_events=kv_log)
    except BaseException as exc:
        traceback.print_exc()
        _send_quietly(outbox, LoadFailed(picklable(exc)))
        os._exit(FATAL_EXIT_CODE)  # ranks half started exit on their own once this process is gone
    freeze_startup_heap()  # this process holds this engine until it exits
    outbox.send(CoreReady(os.getpid(), core.max_model_len, core.stats(), kv_log.take()))
    try:
        drive(core, CommandInbox(commands), BatchSender(core, outbox, kv_log))
    except BaseException as exc:
        if isinstance(exc, RankFailure):
            reason = str(exc)
        else:
            traceback.print_exc()
            reason = f"the engine core's loop crashed: {type(exc).__name__}: {exc}"
        _die(outbox, reason)
    core.shutdown()  # the other tensor-parallel ranks


def _leave_a_core_to_the_front_end(config: EngineConfig) -> None:
    """On CPU, torch's default (a spinning OpenMP thread per core) starves the server process, which
    then admits requests and streams tokens late: 64 streams x 64 tokens took 12-29 s instead of
    1.7 s on a busy 2-core host. An explicit OMP_NUM_THREADS is left alone."""
    if config.resolved_device() != "cpu" or "OMP_NUM_THREADS" in os.environ:
        return
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, (cores - 1) // config.world_size))


def _die(outbox: Outbox, reason: str) -> None:
    print(f"chassis engine core (pid {os.getpid()}): {reason}", file=sys.stderr, flush=True)
    _send_quietly(outbox, CoreFatal(reason))
    os._exit(FATAL_EXIT_CODE)  # skip teardown: a step may be stuck in a collective that never returns


def _send_quietly(outbox: Outbox, message) -> None:
    try:
        outbox.send(message)
    except OSError:  # the front end is gone already
        pass
