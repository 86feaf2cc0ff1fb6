"""``torch.distributed`` set-up per platform: gloo on CPU, NCCL on CUDA, HCCL (torch_npu) on Ascend.

Rank 0 hosts a TCPStore on loopback (the ranks of one replica share a host) on a port the OS picks,
so concurrent replicas never race for a port; the other ranks join it by that port.
"""

from __future__ import annotations

from datetime import timedelta

import torch

from engine.device_runtime import npu_device_count, resolve_device

BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
STORE_HOST = "127.0.0.1"
# A collective that waits this long means a rank hung (a dead rank is noticed within a second by
# the executor's watchdog). Generous: the first step compiles kernels and captures CUDA graphs.
COLLECTIVE_TIMEOUT = timedelta(seconds=300)


def backend_for(device_type: str) -> str:
    if device_type not in BACKENDS:
        raise ValueError(f"tensor parallelism does not support device {device_type!r}")
    return BACKENDS[device_type]


def rank_device(device_type: str, rank: int) -> torch.device:
    """Rank r drives the r-th visible accelerator (the launcher sets CUDA/ASCEND_RT_VISIBLE_DEVICES)."""
    if device_type == "cpu":
        return torch.device("cpu")
    if device_type == "npu":  # pragma: no cover - needs Ascend
        resolve_device("npu")  # imports torch_npu: registers the npu device and the hccl backend
        torch.npu.set_device(rank)
    else:
        torch.cuda.set_device(rank)
    return torch.device(device_type, rank)


def visible_accelerators(device_type: str) -> int:
    if device_type == "cuda":
        return torch.cuda.device_count()
    if device_type == "npu":
        return npu_device_count()
    return 1 << 30  # CPU ranks share the host's cores


def create_store(world_size: int) -> torch.distributed.TCPStore:
    """Rank 0's store; ``store.port`` is what the other ranks join."""
    import torch.distributed as dist

    return dist.TCPStore(
        STORE_HOST, 0, world_size, is_master=True, timeout=COLLECTIVE_TIMEOUT, wait_for_workers=False
    )


def join_store(port: int, world_size: int) -> torch.distributed.TCPStore:
    import torch.distributed as dist

    return dist.TCPStore(STORE_HOST, port, world_size, is_master=False, timeout=COLLECTIVE_TIMEOUT)


def init_process_group(store, device: torch.device, rank: int, world_size: int) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError(
            "this process already belongs to a torch.distributed group: one tensor-parallel engine "
            "per process (shut the other one down first)"
        )
    dist.init_process_group(
        backend=backend_for(device.type),
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=COLLECTIVE_TIMEOUT,
        device_id=device if device.type != "cpu" else None,
    )
    from engine.distributed import symmetric_all_reduce
    from engine.distributed.group import use_symmetric_all_reduce

    use_symmetric_all_reduce(symmetric_all_reduce.build(device, rank, world_size))


def destroy_process_group(wait_s: float | None = None) -> bool:
    """Leave the group. ``wait_s``: give up after this long and return False, leaving the group to
    the process's exit. NCCL's teardown can block for good: on two H200s rank 0 hung here at the end
    of ``scripts/gpu/check_tp.py`` (cause not found yet), while the same shutdown took 0.5 s elsewhere."""
    import threading

    import torch.distributed as dist

    from engine.distributed.group import use_symmetric_all_reduce

    use_symmetric_all_reduce(None)
    if not dist.is_initialized():
        return True
    if wait_s is None:
        dist.destroy_process_group()
        return True
    done = threading.Thread(target=dist.destroy_process_group, name="chassis-tp-destroy", daemon=True)
    done.start()
    done.join(wait_s)
    return not done.is_alive()
