import django_filters
from django.contrib.auth import get_user_model

from controlplane.api.models import AuditEntry


class UserFilterSet(django_filters.FilterSet):
    class Meta:
        model = get_user_model()
        fields = {"username": ["exact", "icontains"], "is_active": ["exact"]}


class AuditEntryFilterSet(django_filters.FilterSet):
    class Meta:
        model = AuditEntry
        fields = {
            "username": ["exact"],
            "action": ["exact"],
            "object_type": ["exact"],
            "object_id": ["exact"],
            "at": ["gte", "lte"],
        }
