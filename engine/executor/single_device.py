"""The whole model on one device, in this process: the model runner itself is the executor.

A subclass rather than a wrapper, so a step costs exactly what ``ModelRunner`` costs (no forwarding
call per step on the host-bound decode path)."""

from __future__ import annotations

from engine.runner.model_runner import ModelRunner


class SingleDeviceExecutor(ModelRunner):
    def shutdown(self) -> None:
        """Nothing outlives the object: no child process, and the device memory goes with it."""
