from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import Count, Q
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from controlplane.api.roles import OPERATOR
from controlplane.api.viewsets import ChassisModelViewSet, ChassisReadOnlyViewSet
from controlplane.serving import services
from controlplane.serving.agent_logs import fetch_log_tail
from controlplane.serving.api.serializers import (
    DeploymentRevisionSerializer,
    DeploymentSerializer,
    MetricSampleSerializer,
    ReplicaChoiceSerializer,
    ReplicaEventSerializer,
    ReplicaSerializer,
    RestartSerializer,
    RollbackSerializer,
    ScaleSerializer,
)
from controlplane.serving.choices import HOLDING_STATES, ReplicaState, user_actor
from controlplane.serving.filtersets import (
    DeploymentFilterSet,
    MetricSampleFilterSet,
    ReplicaEventFilterSet,
    ReplicaFilterSet,
)
from controlplane.serving.models import Deployment, MetricSample, Replica, ReplicaEvent


class DeploymentViewSet(ChassisModelViewSet):
    queryset = Deployment.objects.select_related("checkpoint", "revision").annotate(
        ready_replicas=Count("replica_set", filter=Q(replica_set__state=ReplicaState.READY))
    )
    serializer_class = DeploymentSerializer
    filterset_class = DeploymentFilterSet
    ordering_fields = ["id", "name", "created"]
    write_role = OPERATOR

    # The row and its revision commit together: the reconciler (beat) must never see a deployment
    # without its revision, or it launches a replica that runs no revision.
    @transaction.atomic
    def perform_create(self, serializer):
        super().perform_create(serializer)
        services.save_spec(serializer.instance, user_actor(self.request.user))

    @transaction.atomic
    def perform_update(self, serializer):
        super().perform_update(serializer)
        services.save_spec(serializer.instance, user_actor(self.request.user))

    def perform_destroy(self, instance):
        if instance.replica_set.filter(state__in=HOLDING_STATES).exists():
            raise serializers.ValidationError(
                {"replicas": ["replicas are still running; scale to 0 and wait first"]}
            )
        super().perform_destroy(instance)

    def _replica(self, deployment, request) -> Replica:
        choice = ReplicaChoiceSerializer(data=request.data)
        choice.is_valid(raise_exception=True)
        replica = deployment.replica_set.filter(pk=choice.validated_data["replica"]).first()
        if replica is None:
            raise serializers.ValidationError({"replica": ["not a replica of this deployment"]})
        return replica

    def _done(self, deployment):
        return Response(self.get_serializer(self.get_queryset().get(pk=deployment.pk)).data, status=202)

    @extend_schema(request=ScaleSerializer, responses={202: DeploymentSerializer})
    @action(detail=True, methods=["post"])
    def scale(self, request, pk=None):
        """Set the desired replica count; extra replicas drain gracefully."""
        deployment = self.get_object()
        payload = ScaleSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        before = deployment.replicas
        services.scale(deployment, payload.validated_data["replicas"])
        self.audit("scale", deployment, {"replicas": [before, deployment.replicas]})
        return self._done(deployment)

    @extend_schema(request=RestartSerializer, responses={202: DeploymentSerializer})
    @action(detail=True, methods=["post"])
    def restart(self, request, pk=None):
        """Rolling restart of one replica (``{"replica": id}``) or of all: a fresh replica starts, the
        old one drains once it is ready (a failed one is retried now)."""
        deployment = self.get_object()
        payload = RestartSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        if "replica" not in payload.validated_data:
            count = services.restart_deployment(deployment, user_actor(request.user))
            self.audit("restart", deployment, {"replicas": count})
            return self._done(deployment)
        replica = self._replica(deployment, request)
        if replica.state not in services.RESTARTABLE_STATES:
            raise serializers.ValidationError(
                {"replica": [f"replica {replica} is {replica.state}; cannot restart it"]}
            )
        services.restart_replica(replica, user_actor(request.user))
        self.audit("restart", deployment, {"replica": replica.pk})
        return self._done(deployment)

    @extend_schema(request=RollbackSerializer, responses={202: DeploymentSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        """Roll back to an earlier revision (``{"revision": n}``, by default the previous one): a
        rolling update to its checkpoint and options."""
        deployment = self.get_object()
        payload = RollbackSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            revision = services.roll_back(
                deployment, payload.validated_data.get("revision"), user_actor(request.user)
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        self.audit("rollback", deployment, {"revision": revision.number})
        return self._done(deployment)

    @extend_schema(responses={200: DeploymentRevisionSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def revisions(self, request, pk=None):
        """Every revision of the deployment, newest first."""
        deployment = self.get_object()
        return Response(DeploymentRevisionSerializer(deployment.revisions.all(), many=True).data)

    @extend_schema(request=ReplicaChoiceSerializer, responses={202: DeploymentSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request, pk=None):
        """Drain one replica (``{"replica": id}``), or the whole deployment (scale to 0) when none is named."""
        deployment = self.get_object()
        if "replica" not in request.data:
            services.drain_deployment(deployment)
            self.audit("drain", deployment)
            return self._done(deployment)
        replica = self._replica(deployment, request)
        if replica.state not in (ReplicaState.LAUNCHING, ReplicaState.READY):
            raise serializers.ValidationError(
                {"replica": [f"replica {replica} is {replica.state}; cannot drain it"]}
            )
        services.drain_replica(
            replica, f"drain requested by {user_actor(request.user)}", user_actor(request.user)
        )
        self.audit("drain", deployment, {"replica": replica.pk})
        return self._done(deployment)


class ReplicaViewSet(ChassisReadOnlyViewSet):
    queryset = Replica.objects.select_related("deployment", "node", "revision").prefetch_related(
        "accelerators"
    )
    serializer_class = ReplicaSerializer
    filterset_class = ReplicaFilterSet
    ordering_fields = ["id", "state", "state_changed_at", "ordinal"]

    @extend_schema(
        responses=inline_serializer(
            "ReplicaLog",
            {
                "replica": serializers.IntegerField(),
                "node": serializers.CharField(allow_null=True),
                "log": serializers.CharField(help_text="The last lines of the engine log."),
                "missing": serializers.CharField(allow_null=True, help_text="Why there is no log, if so."),
            },
        )
    )
    @action(detail=True, methods=["get"])
    def log(self, request, pk=None):
        """The end of the replica's engine log, read by the agent of its node (the file lives there)."""
        replica = self.get_object()
        tail, missing = fetch_log_tail(replica)
        node = replica.node.name if replica.node else None
        return Response({"replica": replica.pk, "node": node, "log": tail, "missing": missing})


class ReplicaEventViewSet(ChassisReadOnlyViewSet):
    queryset = ReplicaEvent.objects.select_related("replica__deployment")
    serializer_class = ReplicaEventSerializer
    filterset_class = ReplicaEventFilterSet
    ordering_fields = ["id", "at"]


class MetricSampleViewSet(ChassisReadOnlyViewSet):
    queryset = MetricSample.objects.all()
    serializer_class = MetricSampleSerializer
    filterset_class = MetricSampleFilterSet
    ordering_fields = ["id", "at"]
