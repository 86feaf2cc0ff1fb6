"""What the engine core needs from whatever runs the model: the ``Executor`` seam.

``EngineCore`` (and its warm-up, the benchmarks and the GPU scripts) reach the model only through
these members. Implementations: ``SingleDeviceExecutor`` (the model runner in this process) and
``TensorParallelExecutor`` (rank 0 here, ranks 1..k-1 in their own processes). New ones (expert
parallel, disaggregated prefill) pass ``tests/engine/executor/test_executor_contract.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from engine.runner.cuda_graphs import DecodeGraphs
    from engine.runner.model_runner import StepResult
    from engine.scheduler.output import SchedulerOutput


@runtime_checkable
class QueuedStep(Protocol):
    """A step whose device work is queued; ``result()`` waits for its sampled token ids."""

    request_ids: list[str]

    def result(self) -> StepResult: ...


@runtime_checkable
class Executor(Protocol):
    # Tests read each step's logits back (``StepResult.logits``); never set while serving.
    keep_logits: bool
    # Benchmarks set a list to get (start, end) CUDA events around each step's device work.
    step_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] | None

    @property
    def graphs(self) -> DecodeGraphs | None:
        """The captured decode graphs (benchmarks and tests inspect them); None before capture."""
        ...

    def allocate_kv_cache(self, num_blocks: int, num_window_blocks: int = 0) -> None:
        """One cache tensor per layer: ``num_blocks`` pages, or ``num_window_blocks`` for a
        sliding-window layer when that is set (a window group beside full-attention layers)."""
        ...

    def capture_decode_graphs(self, max_batch: int, eager: bool = False) -> None:
        """After the KV cache exists. ``eager``: the graphs' static-buffer path without graphs."""
        ...

    def capture_moe_graphs(self, max_tokens: int, eager: bool = False) -> int:
        """Graphs for the MoE blocks of eager steps up to ``max_tokens`` rows
        (``engine.runner.moe_graphs``); returns how many layers they serve, 0 where none can."""
        ...

    def routing_statistics(self) -> dict[str, list[int]]:
        """Tokens routed to each expert of every mixture-of-experts layer (``engine.layers.moe``);
        empty for a dense model."""
        ...

    def reset_routing_statistics(self) -> None: ...

    def expert_parallel_report(self, expert_tokens: dict[str, list[int]]) -> dict[str, dict]:
        """Expert parallel: per MoE layer, tokens per rank under its placement, the imbalance ratio
        and the load balancer's moves (``routing_statistics()``'s counts in); empty otherwise."""
        ...

    def add_generator(self, request_id: str, seed: int) -> None:
        """A seeded request's random generator, before its first sampling step."""
        ...

    def drop_request(self, request_id: str) -> None:
        """Forget a finished or aborted request (unknown ids are ignored)."""
        ...

    def can_overlap(self, out: SchedulerOutput) -> bool:
        """Whether ``out`` may launch before the step in flight is read (async scheduling); a step
        with grammars may, if the step in flight is read in ``launch``'s ``before_sampling``."""
        ...

    def launch(self, out: SchedulerOutput, before_sampling: Callable[[], None] | None = None) -> QueuedStep:
        """Queue the step; a decode request's pending token is fed from the previous step's samples
        on the device. ``before_sampling`` runs once the forward is queued, before the sampling
        (and its grammar masks) is."""
        ...

    def execute(self, out: SchedulerOutput) -> StepResult:
        """Run the step and wait for its samples."""
        ...

    def shutdown(self) -> None:
        """Release what outlives the object (child processes); idempotent."""
        ...
