from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from controlplane.api.roles import OPERATOR
from controlplane.api.viewsets import ChassisModelViewSet
from controlplane.benchmarks import conditions, services
from controlplane.benchmarks.api.serializers import (
    BenchmarkRunSerializer,
    BenchmarkScheduleSerializer,
    ReproducePreviewSerializer,
    ReproduceSerializer,
)
from controlplane.benchmarks.filtersets import BenchmarkRunFilterSet, BenchmarkScheduleFilterSet
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule


class BenchmarkRunViewSet(ChassisModelViewSet):
    """Runs are created and cancelled, never edited: their figures are what was measured."""

    queryset = BenchmarkRun.objects.select_related("deployment__checkpoint")
    serializer_class = BenchmarkRunSerializer
    filterset_class = BenchmarkRunFilterSet
    ordering_fields = ["id", "created", "started_at", "finished_at", "state"]
    ordering = ["-created", "-id"]
    write_role = OPERATOR
    http_method_names = ["get", "post", "head", "options"]

    def perform_create(self, serializer):
        serializer.instance = services.create_run(self.request.user, **serializer.validated_data)

    @extend_schema(
        request=ReproduceSerializer, responses={202: BenchmarkRunSerializer, 200: ReproducePreviewSerializer}
    )
    @action(detail=True, methods=["post"])
    def reproduce(self, request, pk=None):
        """Re-run this run's workload, seed and sweep on a named deployment. The conditions that differ
        from this run's come back in `conditions_diff` (alone, with `preview`), and stay with the new run."""
        source = self.get_object()
        params = ReproduceSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        deployment = params.validated_data["deployment"]
        if params.validated_data["preview"]:
            changed = conditions.diff(source.conditions, conditions.preview(source, deployment))
            return Response({"source": source.pk, "deployment": deployment.name, "conditions_diff": changed})
        run = services.reproduce_run(source, deployment, request.user)
        return Response(self.get_serializer(run).data, status=202)

    @extend_schema(request=None, responses={202: BenchmarkRunSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a queued or running benchmark; a running one stops before its next request."""
        run = self.get_object()
        try:
            services.cancel_run(run, request.user)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return Response(self.get_serializer(run).data, status=202)


class BenchmarkScheduleViewSet(ChassisModelViewSet):
    queryset = BenchmarkSchedule.objects.select_related("deployment")
    serializer_class = BenchmarkScheduleSerializer
    filterset_class = BenchmarkScheduleFilterSet
    ordering_fields = ["id", "name", "created", "interval_minutes"]
    write_role = OPERATOR

    def perform_create(self, serializer):
        serializer.validated_data["created_by"] = self.request.user
        super().perform_create(serializer)
