import django_tables2 as tables

from controlplane.api.models import AuditEntry
from controlplane.api.roles import ADMIN
from controlplane.web.access import role_required
from controlplane.web.tables import ChassisTable, SearchFilterSet, table_page


class AuditTable(ChassisTable):
    at = tables.DateTimeColumn(format="Y-m-d H:i:s")
    changes = tables.JSONColumn(orderable=False, attrs={"td": {"class": "reason"}})

    class Meta(ChassisTable.Meta):
        model = AuditEntry
        fields = ["at", "username", "action", "object_type", "object_id", "object_repr", "changes"]


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
