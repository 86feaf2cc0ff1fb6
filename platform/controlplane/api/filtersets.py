"""Filter sets: ChassisFilterSet is the base of every API filter set."""

from __future__ import annotations

from datetime import UTC

import django_filters
from django import forms
from django.contrib.auth import get_user_model
from django.db import models
from django_filters.filterset import FILTER_FOR_DBFIELD_DEFAULTS

from controlplane.api.models import ApiToken, AuditEntry


class UTCDateTimeField(forms.DateTimeField):
    """A datetime in UTC: PostgreSQL refuses UTC offsets past ±15:59, which ISO 8601 allows."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return None
        try:
            return value.astimezone(UTC)
        except OverflowError:  # the offset pushes it past year 1 or 9999
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None


class UTCDateTimeFilter(django_filters.DateTimeFilter):
    field_class = UTCDateTimeField


class ChassisFilterSet(django_filters.FilterSet):
    FILTER_DEFAULTS = {**FILTER_FOR_DBFIELD_DEFAULTS, models.DateTimeField: {"filter_class": UTCDateTimeFilter}}


class UserFilterSet(ChassisFilterSet):
    class Meta:
        model = get_user_model()
        fields = {"username": ["exact", "icontains"], "is_active": ["exact"]}


class AuditEntryFilterSet(ChassisFilterSet):
    class Meta:
        model = AuditEntry
        fields = {
            "username": ["exact"],
            "action": ["exact"],
            "object_type": ["exact"],
            "object_id": ["exact"],
            "at": ["gte", "lte"],
        }


class ApiTokenFilterSet(ChassisFilterSet):
    revoked = django_filters.BooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = ApiToken
        fields = {"name": ["exact", "icontains"], "user": ["exact"]}
