"""Base viewsets: a viewset states queryset, serializer, filterset and roles; auditing lives here."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, viewsets

from controlplane.api import audit
from controlplane.api.exceptions import StillReferencedSerializer
from controlplane.api.permissions import RolePermission
from controlplane.api.roles import ADMIN, VIEWER


class ChassisReadOnlyViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [RolePermission]
    read_role = VIEWER
    write_role = ADMIN
    ordering = ["id"]


@extend_schema_view(destroy=extend_schema(responses={204: None, 409: StillReferencedSerializer}))
class ChassisModelViewSet(
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ChassisReadOnlyViewSet,
):
    def perform_create(self, serializer) -> None:
        instance = serializer.save()
        audit.record(self.request.user, "create", instance, dict(serializer.validated_data))

    def perform_update(self, serializer) -> None:
        instance = serializer.save()
        audit.record(self.request.user, "update", instance, dict(serializer.validated_data))

    def perform_destroy(self, instance) -> None:
        audit.delete(self.request.user, instance)  # recorded only once the delete succeeded

    def audit(self, action: str, instance, changes: dict | None = None) -> None:
        audit.record(self.request.user, action, instance, changes)
