"""The nodes table, with cordon (no new replicas placed there) and uncordon."""

from __future__ import annotations

import django_tables2 as tables
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from controlplane.api import audit
from controlplane.api.roles import ADMIN
from controlplane.fleet.models import Node
from controlplane.serving.choices import HOLDING_STATES
from controlplane.web.access import role_required
from controlplane.web.tables import ChassisTable, SearchFilterSet, WhenColumn, table_page

ACTIONS = """{% if can_admin %}
{% if record.state == "cordoned" %}<form method="post" action="{% url 'node-action' record.pk 'uncordon' %}" class="inline">{% csrf_token %}<button type="submit">Uncordon</button></form>
{% else %}<form method="post" action="{% url 'node-action' record.pk 'cordon' %}" class="inline">{% csrf_token %}<button type="submit">Cordon</button></form>{% endif %}
<a href="{% url 'node-delete' record.pk %}">delete</a>{% endif %}"""


class NodeTable(ChassisTable):
    name = tables.Column()
    state = tables.TemplateColumn('<span class="state state-{{ value }}">{{ value }}</span>')
    state_reason = tables.Column(verbose_name="why", attrs={"td": {"class": "reason"}})
    domain = tables.Column(accessor="domain__name", verbose_name="scale-up domain")
    address = tables.Column()
    accelerator_count = tables.Column(verbose_name="accelerators")
    replica_count = tables.Column(verbose_name="replicas")
    last_heartbeat = WhenColumn()
    actions = tables.TemplateColumn(ACTIONS, accessor="pk", orderable=False, verbose_name="")
    exclude_from_export = ("actions",)

    class Meta(ChassisTable.Meta):
        model = Node
        fields = ["name", "state", "state_reason", "domain", "address", "last_heartbeat"]
        sequence = ["name", "state", "state_reason", "domain", "address", "accelerator_count",
                    "replica_count", "last_heartbeat", "actions"]  # fmt: skip
        row_attrs = {
            "id": lambda record: f"node-row-{record.name}",
            "data-state": lambda record: record.state,
        }


class NodeFilter(SearchFilterSet):
    search_fields = ("name", "hostname", "address", "domain__name")

    class Meta:
        model = Node
        fields = ["state"]


@role_required()
def node_list(request):
    nodes = Node.objects.select_related("domain").annotate(
        accelerator_count=Count("accelerators", distinct=True),
        replica_count=Count("replicas", filter=Q(replicas__state__in=HOLDING_STATES), distinct=True),
    )
    return table_page(
        request, table_class=NodeTable, filterset_class=NodeFilter, queryset=nodes, title="Nodes"
    )


@require_POST
@role_required(ADMIN)
def node_action(request, pk: int, verb: str):
    if verb not in ("cordon", "uncordon"):
        raise Http404(f"no node action {verb!r}")
    node = get_object_or_404(Node, pk=pk)
    try:
        node.cordon() if verb == "cordon" else node.uncordon()
    except ValidationError:
        pass  # it moved meanwhile (lost, or already up); the table shows the state it is in
    else:
        audit.record(request.user, verb, node, {"state": node.state})
    return redirect("node-list")
