from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.api import audit
from controlplane.api.roles import OPERATOR, has_role
from controlplane.checkpoints.forms import CheckpointForm
from controlplane.checkpoints.models import Checkpoint
from controlplane.checkpoints.tasks import validate_after_commit
from controlplane.web.access import role_required
from controlplane.web.pages.catalog import checkpoint_table_page


@role_required()
def checkpoint_list(request):
    form = CheckpointForm()
    if request.method == "POST":
        if not has_role(request.user, OPERATOR):
            raise PermissionDenied("registering checkpoints needs the operator role")
        form = CheckpointForm(request.POST)
        if form.is_valid():
            with transaction.atomic():
                checkpoint = form.save()
                audit.record(request.user, "create", checkpoint, form.cleaned_data)
                validate_after_commit(checkpoint.pk)
            return redirect("checkpoint-list")
    return checkpoint_table_page(request, form, status=400 if form.errors else 200)


@require_POST
@role_required(OPERATOR)
def checkpoint_validate(request, pk: int):
    checkpoint = get_object_or_404(Checkpoint, pk=pk)
    with transaction.atomic():
        audit.record(request.user, "validate", checkpoint)
        validate_after_commit(checkpoint.pk)
    return redirect("checkpoint-list")


@role_required()
def checkpoint_detail(request, pk: int):
    checkpoint = get_object_or_404(Checkpoint, pk=pk)
    # An expert-parallel rank holds the dense weights whole and a share of the routed experts; the
    # recorded facts do not split the two, so no figure is given rather than a wrong one.
    deployments = [
        (
            deployment,
            checkpoint.memory_per_device_bytes(deployment.tp_size) if deployment.ep_size == 1 else None,
        )
        for deployment in checkpoint.deployments.order_by("name")
    ]
    return render(
        request, "web/checkpoint_detail.html", {"checkpoint": checkpoint, "deployments": deployments}
    )


@role_required()
def checkpoint_rows(request):
    return checkpoint_table_page(request, None, template="web/_checkpoint_rows.html")
