from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.response import Response

from controlplane.api import audit
from controlplane.api.filtersets import ApiTokenFilterSet, AuditEntryFilterSet, UserFilterSet
from controlplane.api.models import ApiToken, AuditEntry
from controlplane.api.roles import ADMIN, VIEWER, has_role
from controlplane.api.serializers import ApiTokenSerializer, AuditEntrySerializer, UserSerializer
from controlplane.api.viewsets import ChassisModelViewSet, ChassisReadOnlyViewSet


class UserViewSet(ChassisModelViewSet):
    queryset = get_user_model().objects.prefetch_related("groups").order_by("id")
    serializer_class = UserSerializer
    filterset_class = UserFilterSet
    ordering_fields = ["id", "username", "date_joined"]
    read_role = ADMIN
    write_role = ADMIN


class AuditEntryViewSet(ChassisReadOnlyViewSet):
    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
    ordering_fields = ["id", "at"]
    ordering = ["-at", "-id"]
    read_role = ADMIN


class ApiTokenViewSet(mixins.CreateModelMixin, ChassisReadOnlyViewSet):
    """Every user issues and revokes their own tokens; an admin sees and revokes everyone's. The key
    is in the create response only: the server keeps its hash."""

    queryset = ApiToken.objects.select_related("user")
    serializer_class = ApiTokenSerializer
    filterset_class = ApiTokenFilterSet
    ordering_fields = ["id", "created", "last_used"]
    ordering = ["-created", "-id"]
    read_role = VIEWER
    write_role = VIEWER

    def get_queryset(self):
        tokens = super().get_queryset()
        return tokens if has_role(self.request.user, ADMIN) else tokens.filter(user=self.request.user)

    def perform_create(self, serializer) -> None:
        token = serializer.save()
        audit.record(self.request.user, "create", token, {"name": token.name})

    @extend_schema(request=None, responses=ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """The token stops working at once; it stays listed, with when it was revoked."""
        token = self.get_object()
        token.revoke()
        audit.record(request.user, "revoke", token)
        return Response(ApiTokenSerializer(token, context={"request": request}).data)
