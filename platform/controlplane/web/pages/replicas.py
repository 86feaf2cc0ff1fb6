"""Replicas across deployments, one replica's page (its events and its log, read through the agent),
and every replica event."""

from __future__ import annotations

import django_tables2 as tables
from django.shortcuts import get_object_or_404, render

from controlplane.serving.agent_logs import fetch_log_tail
from controlplane.serving.choices import ReplicaState
from controlplane.serving.models import Replica, ReplicaEvent
from controlplane.web.access import role_required
from controlplane.web.tables import ChassisTable, SearchFilterSet, WhenColumn, table_page


class ReplicaTable(ChassisTable):
    replica = tables.Column(
        accessor="ordinal", verbose_name="replica", linkify=("replica-detail", {"pk": tables.A("pk")})
    )
    deployment = tables.Column(
        accessor="deployment__name",
        verbose_name="deployment",
        linkify=("deployment-detail", {"pk": tables.A("deployment_id")}),
    )
    state = tables.TemplateColumn('<span class="state state-{{ value }}">{{ value }}</span>')
    reason = tables.Column(verbose_name="why", attrs={"td": {"class": "reason"}})
    node = tables.Column(accessor="node__name", verbose_name="node")
    port = tables.Column()
    pid = tables.Column()
    launch_attempts = tables.Column(verbose_name="launches")
    state_changed_at = WhenColumn(verbose_name="since")

    class Meta(ChassisTable.Meta):
        model = Replica
        fields = []
        sequence = ["replica", "deployment", "state", "reason", "node", "port", "pid", "launch_attempts",
                    "state_changed_at"]  # fmt: skip
        row_attrs = {"data-state": lambda record: record.state}

    def render_replica(self, record):
        return str(record)

    def value_replica(self, record):
        return str(record)

    def render_reason(self, value):
        return value if len(value) <= 160 else value[:159] + "…"


class ReplicaFilter(SearchFilterSet):
    search_fields = ("deployment__name", "node__name", "reason")

    class Meta:
        model = Replica
        fields = ["state"]


@role_required()
def replica_list(request):
    replicas = Replica.objects.select_related("deployment", "node")
    if "state" not in request.GET:
        replicas = replicas.exclude(state=ReplicaState.STOPPED)
    return table_page(
        request, table_class=ReplicaTable, filterset_class=ReplicaFilter, queryset=replicas, title="Replicas"
    )


class EventTable(ChassisTable):
    at = WhenColumn()
    replica = tables.Column(
        accessor="replica",
        linkify=("replica-detail", {"pk": tables.A("replica_id")}),
        attrs={"td": {"class": "name"}},
    )
    from_state = tables.Column(verbose_name="from", default="—")
    to_state = tables.Column(verbose_name="to")
    reason = tables.Column(attrs={"td": {"class": "reason"}})

    def render_reason(self, value):
        """A failure's reason carries a log tail: the first 400 characters here, all of it in the CSV."""
        return value if len(value) <= 400 else value[:399] + "…"

    class Meta(ChassisTable.Meta):
        model = ReplicaEvent
        fields = ["at", "replica", "from_state", "to_state", "reason", "actor"]
        order_by = ["-at"]


class EventFilter(SearchFilterSet):
    search_fields = ("replica__deployment__name", "reason", "actor")

    class Meta:
        model = ReplicaEvent
        fields = ["to_state"]


def _events():
    return ReplicaEvent.objects.select_related("replica__deployment").order_by("-at", "-id")


@role_required()
def event_list(request):
    return table_page(request, table_class=EventTable, filterset_class=EventFilter, queryset=_events(),
                      title="Replica events")  # fmt: skip


@role_required()
def replica_detail(request, pk: int):
    replica = get_object_or_404(Replica.objects.select_related("deployment", "node"), pk=pk)
    return table_page(
        request,
        table_class=EventTable,
        filterset_class=EventFilter,
        queryset=_events().filter(replica=replica),
        title=f"Replica {replica}",
        template="web/replica_detail.html",
        context={"replica": replica},
    )


@role_required()
def replica_log(request, pk: int):
    """The htmx-loaded log part of the replica page."""
    replica = get_object_or_404(Replica.objects.select_related("node"), pk=pk)
    tail, missing = fetch_log_tail(replica)
    return render(request, "web/_replica_log.html", {"replica": replica, "tail": tail, "missing": missing})
