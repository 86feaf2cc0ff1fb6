import json

import django_tables2 as tables

from controlplane.api.models import AuditEntry
from controlplane.api.roles import ADMIN
from controlplane.web.access import role_required
from controlplane.web.tables import ChassisTable, SearchFilterSet, WhenColumn, table_page


class AuditTable(ChassisTable):
    at = WhenColumn()
    object_id = tables.Column(verbose_name="id")
    object_repr = tables.Column(verbose_name="object")
    changes = tables.Column(orderable=False, attrs={"td": {"class": "changes"}})

    class Meta(ChassisTable.Meta):
        model = AuditEntry
        fields = ["at", "username", "action", "object_type", "object_id", "object_repr", "changes"]

    def render_changes(self, value):
        return json.dumps(value, separators=(", ", ": "), sort_keys=True)

    def value_changes(self, value):
        return json.dumps(value, sort_keys=True)


class AuditFilter(SearchFilterSet):
    search_fields = ("username", "action", "object_type", "object_repr")

    class Meta:
        model = AuditEntry
        fields = ["action", "object_type"]


@role_required(ADMIN)
def audit_list(request):
    return table_page(
        request,
        table_class=AuditTable,
        filterset_class=AuditFilter,
        queryset=AuditEntry.objects.all(),
        title="Audit log",
    )
