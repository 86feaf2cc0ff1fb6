import django_filters

from controlplane.checkpoints.models import Checkpoint


class CheckpointFilterSet(django_filters.FilterSet):
    class Meta:
        model = Checkpoint
        fields = {
            "name": ["exact", "icontains"],
            "revision": ["exact"],
            "state": ["exact", "in"],
            "architecture": ["exact"],
        }
