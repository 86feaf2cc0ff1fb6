from controlplane.checkpoints.models.checkpoint import Checkpoint

__all__ = ["Checkpoint"]
