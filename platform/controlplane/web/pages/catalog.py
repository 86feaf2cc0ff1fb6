"""The checkpoint and deployment tables of their list pages (the views stay in their apps)."""

from __future__ import annotations

import django_tables2 as tables
from django.template.defaultfilters import filesizeformat

from controlplane.checkpoints.models import Checkpoint
from controlplane.serving.models import Deployment
from controlplane.web.tables import ChassisTable, SearchFilterSet, table_page
from controlplane.web.templatetags.units import count

STATE_CELL = {"td": {"class": lambda value: f"state state-{value}"}}

CHECKPOINT_ACTIONS = """{% if can_operate %}<form method="post" action="{% url 'checkpoint-validate' record.pk %}" class="inline">{% csrf_token %}<button type="submit">Validate</button></form>
<a href="{% url 'checkpoint-delete' record.pk %}">delete</a>{% endif %}"""


class CheckpointTable(ChassisTable):
    checkpoint = tables.Column(
        accessor="name", verbose_name="checkpoint", linkify=("checkpoint-detail", {"pk": tables.A("pk")})
    )
    path = tables.TemplateColumn("<code>{{ value }}</code>")
    state = tables.Column(attrs=STATE_CELL)
    parameter_count = tables.Column(verbose_name="parameters")
    size_bytes = tables.Column(verbose_name="size")
    memory_per_replica_bytes = tables.Column(verbose_name="memory / replica")
    reason = tables.Column(verbose_name="why", attrs={"td": {"class": "reason"}})
    actions = tables.TemplateColumn(CHECKPOINT_ACTIONS, accessor="pk", orderable=False, verbose_name="")
    exclude_from_export = ("actions",)

    class Meta(ChassisTable.Meta):
        model = Checkpoint
        fields = ["architecture", "dtype"]
        sequence = ["checkpoint", "path", "state", "architecture", "parameter_count", "dtype", "size_bytes",
                    "memory_per_replica_bytes", "reason", "actions"]  # fmt: skip
        attrs = {**ChassisTable.Meta.attrs, "tbody": {"id": "checkpoint-rows"}}
        row_attrs = {"id": lambda record: f"checkpoint-{record.pk}"}

    def render_checkpoint(self, record):
        return str(record)

    def value_checkpoint(self, record):
        return str(record)

    def render_parameter_count(self, record):
        text = count(record.parameter_count)
        active = record.active_parameter_count
        return (
            f"{text} ({count(active)} active)"
            if active is not None and active != record.parameter_count
            else text
        )

    def render_size_bytes(self, value):
        return filesizeformat(value)

    def render_memory_per_replica_bytes(self, value):
        return filesizeformat(value)


class CheckpointFilter(SearchFilterSet):
    search_fields = ("name", "revision", "path", "architecture")

    class Meta:
        model = Checkpoint
        fields = ["state"]


def checkpoint_table_page(request, form, status: int = 200, template: str = "web/checkpoints.html"):
    return table_page(request, table_class=CheckpointTable, filterset_class=CheckpointFilter,
                      queryset=Checkpoint.objects.all(), title="Checkpoints", template=template,
                      context={"form": form}, status=status)  # fmt: skip


class DeploymentTable(ChassisTable):
    name = tables.Column(linkify=("deployment-detail", {"pk": tables.A("pk")}))
    served_model_name = tables.Column(verbose_name="model name")
    checkpoint = tables.Column(accessor="checkpoint", order_by=("checkpoint__name", "checkpoint__revision"))
    replicas = tables.Column()
    vendor = tables.TemplateColumn(
        "{{ record.vendor }} × {{ record.parallelism }}", verbose_name="vendor × parallelism"
    )
    placement_status = tables.TemplateColumn(
        "{{ value }} {{ record.placement_reason }}", verbose_name="placement", attrs=STATE_CELL
    )

    class Meta(ChassisTable.Meta):
        model = Deployment
        fields = ["name", "served_model_name", "checkpoint", "replicas", "vendor", "role", "routing_policy",
                  "placement_status"]  # fmt: skip
        row_attrs = {"id": lambda record: f"deployment-{record.pk}"}


class DeploymentFilter(SearchFilterSet):
    search_fields = ("name", "served_model_name", "checkpoint__name")

    class Meta:
        model = Deployment
        fields = ["vendor", "placement_status"]


def deployment_table_page(request, form, status: int = 200):
    return table_page(request, table_class=DeploymentTable, filterset_class=DeploymentFilter,
                      queryset=Deployment.objects.select_related("checkpoint"), title="Deployments",
                      template="web/deployments.html", context={"form": form}, status=status)  # fmt: skip
