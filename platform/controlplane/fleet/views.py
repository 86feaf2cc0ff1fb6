from django.shortcuts import render

from controlplane.fleet.models import Node
from controlplane.serving.choices import HOLDING_STATES
from controlplane.web.access import role_required


@role_required()
def fleet_overview(request):
    nodes = Node.objects.select_related("domain__cluster").prefetch_related(
        "accelerators__replicas__deployment"
    )
    rows = []
    for node in nodes:
        accelerators = [
            (acc, [r for r in acc.replicas.all() if r.state in HOLDING_STATES])
            for acc in node.accelerators.all()
        ]
        rows.append(
            (node, accelerators, node.replicas.filter(state__in=HOLDING_STATES).select_related("deployment"))
        )
    return render(request, "web/fleet.html", {"rows": rows})
