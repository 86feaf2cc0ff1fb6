from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.response import Response

from controlplane.api.roles import OPERATOR
from controlplane.api.viewsets import ChassisModelViewSet
from controlplane.checkpoints.api.serializers import CheckpointSerializer
from controlplane.checkpoints.filtersets import CheckpointFilterSet
from controlplane.checkpoints.models import Checkpoint
from controlplane.checkpoints.tasks import validate_after_commit


class CheckpointViewSet(ChassisModelViewSet):
    queryset = Checkpoint.objects.all()
    serializer_class = CheckpointSerializer
    filterset_class = CheckpointFilterSet
    ordering_fields = ["id", "name", "created", "state"]
    write_role = OPERATOR

    def perform_create(self, serializer):
        super().perform_create(serializer)
        validate_after_commit(serializer.instance.pk)

    def perform_update(self, serializer):
        super().perform_update(serializer)
        validate_after_commit(serializer.instance.pk)

    @extend_schema(request=None, responses={202: CheckpointSerializer})
    @action(detail=True, methods=["post"])
    def validate(self, request, pk=None):
        """Validate (again) in the background: registered|ready|invalid -> validating -> ready|invalid."""
        checkpoint = self.get_object()
        validate_after_commit(checkpoint.pk)
        self.audit("validate", checkpoint)
        return Response(self.get_serializer(checkpoint).data, status=202)
