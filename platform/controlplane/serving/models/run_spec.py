"""What a deployment's replicas run, as the deployment wants it and as each revision recorded it."""

from __future__ import annotations

# The fields a revision records: changing one makes a new revision (a rolling update follows); the
# replica count, vendor and role are not among them.
SPEC_FIELDS = ("checkpoint_id", "engine_options", "tp_size", "ep_size", "dp_size")


class RunSpec:
    """Shared by Deployment and DeploymentRevision, which both carry SPEC_FIELDS."""

    def spec(self) -> tuple:
        return tuple(getattr(self, name) for name in SPEC_FIELDS)

    @property
    def world_size(self) -> int:
        """Accelerators (engine rank processes) one replica spans, as EngineConfig.world_size counts."""
        return self.tp_size * self.ep_size

    @property
    def parallelism(self) -> str:
        """'tp 2', or 'ep 4 · dp 4' for an expert-parallel replica (tensor-parallel size 1)."""
        if self.ep_size == 1 and self.dp_size == 1:
            return f"tp {self.tp_size}"
        tp = f"tp {self.tp_size} · " if self.tp_size != 1 else ""
        return f"{tp}ep {self.ep_size} · dp {self.dp_size}"
