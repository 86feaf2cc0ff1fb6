"""What this host's CPU computes natively, for choices that pay only on some CPUs. Torch-free (the
control plane asks too)."""

from __future__ import annotations

from pathlib import Path

# x86 flags (Linux /proc/cpuinfo) of native bfloat16 products: AVX-512 BF16 (Zen 4, Cooper Lake and
# later) and AMX (Sapphire Rapids and later).
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def native_bfloat16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU multiplies bfloat16 natively. There torch's bfloat16 products, and the bfloat16
    path of the 4-bit GGUF kernel (``EngineConfig.gguf_weights`` int4), outrun float32; elsewhere
    bfloat16 is emulated and slower than float32. ``cpuinfo``: the text of /proc/cpuinfo (read when
    None; False where there is none)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return any(flag in flags for flag in BFLOAT16_FLAGS)
    return False
