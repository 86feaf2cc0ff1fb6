"""What accelerators this machine has: NVIDIA through NVML, Ascend through npu-smi, else the CPU.

Runs inside the node agent, never in the web process.
"""

from __future__ import annotations

import logging
import os
import platform as stdlib_platform
import shutil
import subprocess
from dataclasses import dataclass

from controlplane.fleet.choices import AcceleratorHealth, Vendor
from controlplane.fleet.npu_smi import parse_npu_smi_info

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AcceleratorInfo:
    vendor: str
    model: str
    index: int
    memory_bytes: int
    health: str = AcceleratorHealth.OK


def probe_nvidia() -> list[AcceleratorInfo]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver / no GPU: not an NVIDIA node
        return []
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            found.append(
                AcceleratorInfo(
                    Vendor.NVIDIA, name if isinstance(name, str) else name.decode(), index, memory
                )
            )
        return found
    finally:
        pynvml.nvmlShutdown()


def probe_ascend(npu_smi: str | None = None) -> list[AcceleratorInfo]:
    npu_smi = npu_smi or shutil.which("npu-smi")
    if not npu_smi:
        return []
    try:
        result = subprocess.run([npu_smi, "info"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("npu-smi is present but failed: %s", exc)
        return []
    return [
        AcceleratorInfo(
            Vendor.ASCEND,
            device.name,
            position,
            device.hbm_total_mb * 1024 * 1024,
            AcceleratorHealth.OK if device.health.upper() == "OK" else AcceleratorHealth.DEGRADED,
        )
        for position, device in enumerate(parse_npu_smi_info(result.stdout))
    ]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return stdlib_platform.processor() or stdlib_platform.machine()


def probe_cpu() -> list[AcceleratorInfo]:
    import psutil

    return [
        AcceleratorInfo(
            Vendor.CPU, f"{_cpu_model()} ({os.cpu_count()} cores)", 0, psutil.virtual_memory().total
        )
    ]


def probe_accelerators() -> list[AcceleratorInfo]:
    return probe_nvidia() or probe_ascend() or probe_cpu()
