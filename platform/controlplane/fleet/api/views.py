from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from controlplane.api.roles import ADMIN
from controlplane.api.viewsets import ChassisModelViewSet
from controlplane.fleet.api.serializers import (
    AcceleratorSerializer,
    ClusterSerializer,
    NodeSerializer,
    ScaleUpDomainSerializer,
)
from controlplane.fleet.filtersets import (
    AcceleratorFilterSet,
    ClusterFilterSet,
    NodeFilterSet,
    ScaleUpDomainFilterSet,
)
from controlplane.fleet.models import Accelerator, Cluster, Node, ScaleUpDomain


class ClusterViewSet(ChassisModelViewSet):
    queryset = Cluster.objects.all()
    serializer_class = ClusterSerializer
    filterset_class = ClusterFilterSet
    ordering_fields = ["id", "name"]
    write_role = ADMIN


class ScaleUpDomainViewSet(ChassisModelViewSet):
    queryset = ScaleUpDomain.objects.select_related("cluster")
    serializer_class = ScaleUpDomainSerializer
    filterset_class = ScaleUpDomainFilterSet
    ordering_fields = ["id", "name"]
    write_role = ADMIN


class NodeViewSet(ChassisModelViewSet):
    queryset = Node.objects.select_related("domain").prefetch_related("accelerators__replicas")
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    ordering_fields = ["id", "name", "state", "last_heartbeat"]
    write_role = ADMIN

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def cordon(self, request, pk=None):
        """Stop placing new replicas on this node (running ones stay)."""
        return self._move(request, "cordon")

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def uncordon(self, request, pk=None):
        return self._move(request, "uncordon")

    def _move(self, request, verb: str):
        node = self.get_object()
        try:
            getattr(node, verb)()
        except ValidationError as exc:
            raise serializers.ValidationError({"state": exc.messages}) from exc
        self.audit(verb, node)
        return Response(NodeSerializer(node, context={"request": request}).data)


class AcceleratorViewSet(ChassisModelViewSet):
    queryset = Accelerator.objects.select_related("node").prefetch_related("replicas")
    serializer_class = AcceleratorSerializer
    filterset_class = AcceleratorFilterSet
    ordering_fields = ["id", "node__name", "vendor", "index"]
    write_role = ADMIN
