from django.contrib.auth import get_user_model

from controlplane.api.filtersets import AuditEntryFilterSet, UserFilterSet
from controlplane.api.models import AuditEntry
from controlplane.api.roles import ADMIN
from controlplane.api.serializers import AuditEntrySerializer, UserSerializer
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
