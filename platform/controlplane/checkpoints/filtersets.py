from controlplane.api.filtersets import ChassisFilterSet
from controlplane.checkpoints.models import Checkpoint


class CheckpointFilterSet(ChassisFilterSet):
    class Meta:
        model = Checkpoint
        fields = {
            "name": ["exact", "icontains"],
            "revision": ["exact"],
            "state": ["exact", "in"],
            "architecture": ["exact"],
        }
