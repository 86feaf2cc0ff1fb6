"""Rank 0 of a tensor-parallel replica: spawns ranks 1..k-1, sends each step to them, runs its own
shard alongside, and samples. The ``Executor`` ``EngineCore`` drives when ``tensor_parallel_size > 1``.

One OS process per rank (``multiprocessing`` spawn); step inputs travel over a pipe per rank,
activations through ``torch.distributed`` (gloo / NCCL / HCCL). A watchdog thread waits on every
rank's process: when one dies the others are killed and the replica ends with an error naming the
dead rank; through the handler ``chassis serve`` installs (the server exits non-zero), or, in
offline use, as a ``RankFailure`` from the next or current step.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from engine import switches
from engine.distributed.group import TPGroup
from engine.distributed.sharding import check_ep_support, check_tp_support
from engine.executor import tp_messages as m
from engine.executor.supervision import describe_exit, release_at_exit, stop_at_exit
from engine.executor.tp_worker import worker_main
from engine.runner.model_runner import ModelRunner, StepResult
from engine.scheduler.output import SchedulerOutput

log = logging.getLogger("chassis.tp")

STOP_TIMEOUT_S = 10.0  # a rank told to stop that is still alive after this is killed
EXPLAIN_WAIT_S = 2.0  # after a failed collective: how long to wait for the watchdog to name the dead rank
DESTROY_TIMEOUT_S = 10.0  # rank 0 leaving the process group; NCCL's teardown may never return
STUCK_STEP_S = 10.0  # a step still blocked this long after a rank died will never return (NCCL)

_failure_handler: Callable[[str], None] | None = None


class RankFailure(RuntimeError):
    """A tensor-parallel rank died; the replica cannot take another step."""


def set_rank_failure_handler(handler: Callable[[str], None] | None) -> None:
    """Called (from the watchdog thread) with the error message when a rank dies. ``chassis serve``
    installs one that ends the server; without one, steps raise ``RankFailure``."""
    global _failure_handler
    _failure_handler = handler


@dataclass
class _Rank:
    rank: int
    process: multiprocessing.process.BaseProcess
    commands: Connection
    replies: Connection
    error: str | None = None


class TensorParallelExecutor:
    def __init__(self, tp_size: int, runner_kwargs: dict) -> None:
        """``runner_kwargs``: ``ModelRunner``'s (``factory.runner_kwargs``); every rank builds its
        runner from them, on its own device. With ``expert_parallel`` set there, the ranks form an
        expert-parallel group instead (``ModelRunner``): the same processes, pipes and watchdog."""
        from engine.distributed import process_group as pg

        device = runner_kwargs["device"]
        self.expert_parallel = bool(runner_kwargs.get("expert_parallel"))
        self.kind = "expert-parallel" if self.expert_parallel else "tensor-parallel"
        balancer = runner_kwargs.get("expert_balancer")
        self._rebalance_every = (
            balancer.interval_steps if balancer is not None and self.expert_parallel else 0
        )
        self._steps = 0
        if self.expert_parallel:
            check_ep_support(runner_kwargs["cfg"], tp_size)
        else:
            check_tp_support(runner_kwargs["cfg"], tp_size)
        pg.backend_for(device.type)
        found = pg.visible_accelerators(device.type)
        if found < tp_size:
            raise ValueError(
                f"tensor_parallel_size={tp_size} needs {tp_size} visible {device.type} devices, found "
                f"{found} (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES list a replica's devices)"
            )
        self.world_size = tp_size
        self._ranks: list[_Rank] = []
        self._dropped: list[str] = []
        self._failure: str | None = None
        self._in_step = False
        self._closing = False
        self._closed = False
        self._joined_group = False
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self.local: ModelRunner | None = None
        self._store = None
        try:
            self._store = pg.create_store(tp_size)
            self._spawn(tp_size, device.type, self._store.port, runner_kwargs)
            self._await(m.JOINING, "join the process group")
            pg.init_process_group(self._store, pg.rank_device(device.type, 0), 0, tp_size)
            self._joined_group = True
            self.local = ModelRunner(**runner_kwargs, tp_group=TPGroup(0, tp_size))
            self._await(m.READY, "load its shard")
        except BaseException:
            self.shutdown()
            raise
        stop_at_exit(self, TensorParallelExecutor.shutdown)
        threading.Thread(target=self._watch, name="chassis-tp-watchdog", daemon=True).start()

    # -- the Executor interface ----------------------------------------------------------------
    def allocate_kv_cache(self, num_blocks: int, num_window_blocks: int = 0) -> None:
        self._everywhere(
            (m.ALLOCATE, num_blocks, num_window_blocks),
            lambda: self.local.allocate_kv_cache(num_blocks, num_window_blocks),
        )

    def routing_statistics(self) -> dict[str, list[int]]:
        if self.expert_parallel:  # each rank routes its own requests' tokens
            return self._everywhere((m.ROUTING,), self.local.routing_statistics_all_ranks)
        return self.local.routing_statistics()  # every rank routes alike

    def reset_routing_statistics(self) -> None:
        if self.expert_parallel:
            self._everywhere((m.RESET_ROUTING,), self.local.reset_routing_statistics)
        else:
            self.local.reset_routing_statistics()

    def expert_parallel_report(self, expert_tokens: dict[str, list[int]]) -> dict[str, dict]:
        return self.local.expert_parallel_report(expert_tokens)  # every rank holds the same placements

    def expert_balancer_report(self) -> dict:
        """The load balancer's last look per MoE layer (tests; empty without it)."""
        if self.local.balancer is None:
            return {}
        return {name: r.as_dict() for name, r in self.local.balancer.report.items()}

    def capture_decode_graphs(self, max_batch: int, eager: bool = False) -> None:
        if self.expert_parallel:  # its steps run eagerly: the dispatch reads split sizes on the host
            log.info("expert parallel: decode steps run without CUDA graphs")
            return
        self._everywhere(
            (m.CAPTURE, max_batch, eager), lambda: self.local.capture_decode_graphs(max_batch, eager=eager)
        )

    def capture_moe_graphs(self, max_tokens: int, eager: bool = False) -> int:
        """None here: a tensor- or expert-parallel MoE block all-reduces or exchanges its rows
        inside, and those collectives stay eager (``engine.runner.moe_graphs``)."""
        return 0

    def execute(self, out: SchedulerOutput) -> StepResult:
        return self.launch(out, share_samples=False).result()

    def launch(self, out: SchedulerOutput, share_samples: bool = True, before_sampling=None) -> _RankedStep:
        """Send the step to ranks > 0 and queue rank 0's part; ``result()`` waits for its samples.
        ``share_samples``, ``before_sampling``: see ``ModelRunner.launch`` (rank 0 runs the hook)."""
        self._steps += 1
        if self._rebalance_every and self._steps % self._rebalance_every == 0:
            self._everywhere((m.REBALANCE,), self.local.rebalance_experts)  # between steps, on every rank
        dropped, self._dropped = self._dropped, []
        launched = self._everywhere(
            (m.STEP, dropped, m.pack_step(out), share_samples),
            lambda: self.local.launch(out, share_samples=share_samples, before_sampling=before_sampling),
        )
        return _RankedStep(self, launched)

    def can_overlap(self, out: SchedulerOutput) -> bool:
        return self.local.can_overlap(out)

    def add_generator(self, request_id: str, seed: int) -> None:
        self.local.add_generator(request_id, seed)  # only rank 0 samples

    def drop_request(self, request_id: str) -> None:
        self.local.drop_request(request_id)
        self._dropped.append(request_id)  # ranks > 0 hear it with the next step

    @property
    def keep_logits(self) -> bool:
        return self.local.keep_logits

    @keep_logits.setter
    def keep_logits(self, value: bool) -> None:
        self.local.keep_logits = value

    @property
    def step_events(self):
        return self.local.step_events

    @step_events.setter
    def step_events(self, value) -> None:
        self.local.step_events = value

    @property
    def graphs(self):
        return self.local.graphs  # rank 0's; every rank captured the same sizes

    @property
    def rank_pids(self) -> dict[int, int]:
        return {r.rank: r.process.pid for r in self._ranks}

    # -- lifecycle -----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every rank (idempotent). Ranks told to stop that do not exit in time are killed."""
        if self._closed:
            return
        self._closed = self._closing = True
        self._wake_w.send(None)
        for r in self._ranks:
            try:
                r.commands.send((m.STOP,))
            except OSError:
                pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for r in self._ranks:
            r.process.join(max(0.0, deadline - time.monotonic()))
        self._kill_ranks()
        if self._joined_group:
            from engine.distributed import process_group as pg

            if not pg.destroy_process_group(wait_s=DESTROY_TIMEOUT_S):
                log.warning(
                    "the tensor-parallel process group did not shut down within %.0f s; left to the "
                    "process's exit (this process cannot start another tensor-parallel engine)",
                    DESTROY_TIMEOUT_S,
                )
            self._joined_group = False
        self._store = None  # its server thread must stop now, not during interpreter teardown
        release_at_exit(self)

    # -- internals -----------------------------------------------------------------------------
    def _spawn(self, tp_size: int, device_type: str, port: int, runner_kwargs: dict) -> None:
        ctx = multiprocessing.get_context("spawn")
        modes = switches.current()  # every rank runs with rank 0's kernel and all-reduce modes
        for rank in range(1, tp_size):
            commands_r, commands_w = ctx.Pipe(duplex=False)
            replies_r, replies_w = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=worker_main,
                args=(rank, tp_size, device_type, port, runner_kwargs, commands_r, replies_w, modes),
                name=f"chassis-tp-rank{rank}",
                daemon=True,
            )
            process.start()
            commands_r.close()
            replies_w.close()
            self._ranks.append(_Rank(rank, process, commands_w, replies_r))
            log.info("%s rank %d of %d started: pid %d", self.kind, rank, tp_size, process.pid)

    def _await(self, tag: str, what: str) -> None:
        """Wait for every rank > 0 to report ``tag``; raise if one fails or dies first."""
        for r in self._ranks:
            wait([r.replies, r.process.sentinel])
            reply = _recv(r.replies)
            if reply is not None and reply[0] == tag:
                continue
            if reply is not None and reply[0] == m.FAILED:
                raise RuntimeError(f"{self.kind} rank {r.rank} failed to {what}:\n{reply[1]}")
            r.process.join(1.0)
            raise RuntimeError(
                f"{self.kind} rank {r.rank} (pid {r.process.pid}) {describe_exit(r.process.exitcode)} "
                f"before it could {what}"
            )

    def _everywhere(self, command: tuple, local_call: Callable):
        """Send ``command`` to ranks > 0, then run rank 0's part; a dead rank becomes RankFailure."""
        if self._failure is not None:
            raise RankFailure(self._failure)
        if self._closed:
            raise RuntimeError("the tensor-parallel runner is shut down")

        def send_then_run():
            for r in self._ranks:
                r.commands.send(command)  # a dead rank's closed pipe raises here: guarded too
            return local_call()

        return self._guarded(send_then_run)

    def _guarded(self, call: Callable):
        """Run rank 0's part of a collective step; a rank that died meanwhile becomes RankFailure."""
        if self._failure is not None:
            raise RankFailure(self._failure)
        self._in_step = True
        try:
            return call()
        except Exception as exc:
            deadline = time.monotonic() + EXPLAIN_WAIT_S
            while self._failure is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._failure is not None:
                raise RankFailure(self._failure) from exc
            raise
        finally:
            self._in_step = False

    def _watch(self) -> None:
        replies = {r.replies: r for r in self._ranks}
        sentinels = {r.process.sentinel: r for r in self._ranks}
        while True:
            ready = wait([self._wake_r, *replies, *sentinels])
            if self._wake_r in ready or self._closing:
                return
            for conn in [c for c in ready if c in replies]:
                reply = _recv(conn)
                if reply is None:
                    replies.pop(conn)
                elif reply[0] == m.FAILED:
                    replies[conn].error = reply[1]
            dead = [sentinels[s] for s in ready if s in sentinels]
            if dead:
                self._rank_died(dead[0])
                return

    def _rank_died(self, r: _Rank) -> None:
        r.process.join(1.0)
        while r.replies.poll():  # its last words, if it had time to send them
            reply = _recv(r.replies)
            if reply is None:
                break
            if reply[0] == m.FAILED:
                r.error = reply[1]
        reason = f": {r.error.strip().splitlines()[-1]}" if r.error else ""
        message = (
            f"{self.kind} rank {r.rank} of {self.world_size} (pid {r.process.pid}) "
            f"{describe_exit(r.process.exitcode)}{reason}; the replica cannot continue"
        )
        self._failure = message
        log.error(message)
        self._kill_ranks()  # the others cannot take a step without it
        if _failure_handler is not None:
            _failure_handler(message)
            return
        deadline = time.monotonic() + STUCK_STEP_S
        while self._in_step and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._in_step:  # blocked in a collective that cannot complete (NCCL waits ~forever)
            log.critical("%s; a step is stuck in a collective, exiting the process", message)
            os._exit(1)

    def _kill_ranks(self) -> None:
        for r in self._ranks:
            if r.process.is_alive():
                r.process.kill()
        for r in self._ranks:
            r.process.join(5.0)


class _RankedStep:
    """Rank 0's launched step; reading its samples waits on the collectives of every rank, so it is
    guarded like the launch (a dead rank surfaces as RankFailure, not as a hang or NCCL error)."""

    def __init__(self, runner: TensorParallelExecutor, launched) -> None:
        self._runner = runner
        self._launched = launched
        self.request_ids = launched.request_ids

    def result(self):
        return self._runner._guarded(self._launched.result)


def _recv(conn: Connection) -> tuple | None:
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None
