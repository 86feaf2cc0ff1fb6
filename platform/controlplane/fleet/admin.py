from django.contrib import admin

from controlplane.fleet.models import Accelerator, Cluster, Node, ScaleUpDomain


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "created"]
    search_fields = ["name"]


@admin.register(ScaleUpDomain)
class ScaleUpDomainAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "interconnect", "created"]
    list_filter = ["cluster"]
    search_fields = ["name"]


class AcceleratorInline(admin.TabularInline):
    model = Accelerator
    extra = 0


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """State changes go through cordon/uncordon (the node list page or the API), not this form."""

    list_display = ["name", "state", "domain", "address", "last_heartbeat"]
    list_filter = ["state", "domain"]
    search_fields = ["name", "hostname", "address"]
    readonly_fields = ["state", "state_reason", "last_heartbeat"]
    inlines = [AcceleratorInline]


@admin.register(Accelerator)
class AcceleratorAdmin(admin.ModelAdmin):
    list_display = ["node", "vendor", "index", "model", "memory_bytes", "health", "last_seen"]
    list_filter = ["vendor", "health"]
    search_fields = ["node__name", "model"]
