"""A tensor-parallel rank other than 0: joins the group, loads its shard, then runs each step rank 0
sends, taking part in every collective. It samples nothing and keeps no request state.

It ignores SIGINT/SIGTERM (a stop signal reaches the whole process group; rank 0 drains first, then
tells it to stop) and exits on its own when rank 0 goes away.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback

from engine.executor import tp_messages as _m
from engine.executor.supervision import ORPHAN_EXIT_CODE, exit_when_orphaned
from engine.switches import Switches


def worker_main(
    rank: int,
    world_size: int,
    device_type: str,
    store_port: int,
    runner_kwargs: dict,
    commands,
    replies,
    switches: Switches,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_when_orphaned()  # once rank 0 is gone, nobody will ever send the next step
    try:
        switches.apply()  # rank 0's kernel and all-reduce modes, before the group's setup reads them
        _serve(rank, world_size, device_type, store_port, runner_kwargs, commands, replies)
    except EOFError:
        os._exit(ORPHAN_EXIT_CODE)  # rank 0 closed its end without saying stop: it died
    except BaseException:
        text = traceback.format_exc()
        print(f"tensor-parallel rank {rank} failed:\n{text}", file=sys.stderr, flush=True)
        try:
            replies.send((_m.FAILED, text))
        except OSError:
            pass
        os._exit(1)  # skip interpreter teardown: the process group may be half dead


def _serve(rank, world_size, device_type, store_port, runner_kwargs, commands, replies) -> None:
    import torch

    from engine.core.gc_heap import collect_if_overdue, collect_when_idle, freeze_startup_heap
    from engine.distributed import process_group as pg
    from engine.distributed.group import TPGroup
    from engine.runner.model_runner import ModelRunner

    if device_type == "cpu":  # ranks share the host's cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    device = pg.rank_device(device_type, rank)
    store = pg.join_store(store_port, world_size)
    replies.send((_m.JOINING,))
    pg.init_process_group(store, device, rank, world_size)
    runner = ModelRunner(**dict(runner_kwargs, device=device), tp_group=TPGroup(rank, world_size))
    runner.samples = False
    freeze_startup_heap()  # this rank holds this runner until it exits (its stalls stall every rank)
    replies.send((_m.READY,))
    while True:
        if not commands.poll():
            collect_when_idle()  # full collections are deferred (engine/core/gc_heap.py)
        command = commands.recv()
        kind = command[0]
        if kind == _m.STEP:
            for rid in command[1]:
                runner.drop_request(rid)
            runner.launch(_m.unpack_step(command[2]), share_samples=command[3])  # samples nothing: no wait
            collect_if_overdue()
        elif kind == _m.ALLOCATE:
            runner.allocate_kv_cache(command[1], command[2])
        elif kind == _m.CAPTURE:
            runner.capture_decode_graphs(command[1], eager=command[2])
            freeze_startup_heap()
        elif kind == _m.ROUTING:
            runner.routing_statistics_all_ranks()
        elif kind == _m.RESET_ROUTING:
            runner.reset_routing_statistics()
        elif kind == _m.REBALANCE:
            runner.rebalance_experts()
        elif kind == _m.STOP:
            break
        else:
            raise RuntimeError(f"unknown command {kind!r} from rank 0")
    pg.destroy_process_group()
