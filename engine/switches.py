"""The kernel and collective switches of an engine process, set once from its ``EngineConfig``.

Kernels and the all-reduce are called far below the config (a layer's forward, a process group's
setup), so the chosen modes are process-wide state in the modules that use them; this is the one
place that sets it. An engine applies its config's switches when it builds, and a tensor-parallel
rank applies the ones rank 0 sends it before it joins the group.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import EngineConfig


@dataclass(frozen=True)
class Switches:
    kernels: str = "auto"
    gemv: str = "auto"
    gemv_table: str | None = None  # None: kernels/gemv_table.json
    tp_all_reduce: str = "auto"
    batch_invariant: bool = False
    cpu_weight_layout: str = "auto"
    shared_experts: str = "auto"
    launch_overlap: str = "auto"
    mla_split_floor: int = 64

    @classmethod
    def of(cls, config: EngineConfig) -> Switches:
        return cls(
            config.kernels,
            config.gemv,
            config.gemv_table,
            config.tp_all_reduce,
            config.batch_invariant,
            config.cpu_weight_layout,
            config.shared_experts,
            config.launch_overlap,
            config.mla_split_floor,
        )

    @classmethod
    def from_environment(cls) -> Switches:
        """What an engine given no explicit choice would run with (``engine/env.py``): for scripts
        that drive layers or process groups without building an engine."""
        return cls.of(EngineConfig(model_dir="."))

    def apply(self) -> None:
        from engine.distributed import symmetric_all_reduce
        from engine.layers import batch_invariant, cpu_weight_layout, linear, moe
        from kernels import _common, gemv_configs, mla_decode

        _common.set_mode(self.kernels)
        _common.set_launch_overlap_mode(self.launch_overlap)
        mla_decode.set_split_floor(self.mla_split_floor)
        cpu_weight_layout.set_cpu_weight_layout(self.cpu_weight_layout)
        moe.set_shared_experts_mode(self.shared_experts)
        linear.set_gemv_mode(self.gemv)
        gemv_configs.set_table_path(self.gemv_table)
        symmetric_all_reduce.set_mode(self.tp_all_reduce)
        batch_invariant.set_batch_invariant(self.batch_invariant)


def current() -> Switches:
    """What this process runs with now (what a tensor-parallel rank must run with too)."""
    from engine.distributed import symmetric_all_reduce
    from engine.layers import batch_invariant, cpu_weight_layout, linear, moe
    from kernels import _common, gemv_configs, mla_decode

    return Switches(
        _common.kernels_mode(),
        linear.gemv_mode(),
        gemv_configs.table_path(),
        symmetric_all_reduce.all_reduce_mode(),
        batch_invariant.batch_invariant(),
        cpu_weight_layout.cpu_weight_layout(),
        moe.shared_experts_mode(),
        _common.launch_overlap_mode(),
        mla_decode.split_floor(),
    )


def apply_switches(config: EngineConfig) -> None:
    Switches.of(config).apply()
