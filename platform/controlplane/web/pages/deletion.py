"""Deleting from the UI: a confirmation page first; a delete that other objects still block answers
409 on the same page, naming them; the audit entry is written only once the delete succeeded."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import ProtectedError, RestrictedError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from controlplane.api import audit
from controlplane.api.roles import ADMIN, OPERATOR
from controlplane.checkpoints.models import Checkpoint
from controlplane.fleet.models import Node
from controlplane.serving.choices import HOLDING_STATES
from controlplane.serving.models import Deployment
from controlplane.web.access import role_required


def _blockers(exc: ProtectedError | RestrictedError) -> list[tuple[str, str]]:
    objects = exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
    return sorted((obj._meta.verbose_name, str(obj)) for obj in objects)


def confirm_delete(request, obj, *, back: str, done: str, running=None):
    """GET: what is about to go and a confirm button; POST: delete, or 409 naming what blocks it.
    ``running()``: what must stop before ``obj`` may go, as (kind, name) pairs (refused while any)."""
    context = {"object": obj, "kind": obj._meta.verbose_name, "back": back}
    still_running = running() if running else []
    if still_running:
        status = 409 if request.method == "POST" else 200
        return render(request, "web/confirm_delete.html", {**context, "running": still_running}, status=status)
    if request.method != "POST":
        return render(request, "web/confirm_delete.html", context)
    try:
        audit.delete(request.user, obj)
    except (ProtectedError, RestrictedError) as exc:
        return render(request, "web/confirm_delete.html", {**context, "blockers": _blockers(exc)}, status=409)
    return redirect(done)


@role_required(OPERATOR)
def checkpoint_delete(request, pk: int):
    checkpoint = get_object_or_404(Checkpoint, pk=pk)
    return confirm_delete(
        request, checkpoint, back=reverse("checkpoint-detail", args=[pk]), done=reverse("checkpoint-list")
    )


@role_required(OPERATOR)
def deployment_delete(request, pk: int):
    """Only once no replica holds an engine or accelerators; its benchmark runs stay (SET_NULL)."""
    deployment = get_object_or_404(Deployment, pk=pk)

    def running() -> list[tuple[str, str]]:
        replicas = deployment.replica_set.filter(state__in=HOLDING_STATES).order_by("ordinal")
        return [("replica", f"{replica} ({replica.state})") for replica in replicas]

    return confirm_delete(
        request, deployment, back=reverse("deployment-detail", args=[pk]), done=reverse("deployment-list"),
        running=running,
    )  # fmt: skip


@role_required(ADMIN)
def node_delete(request, pk: int):
    return confirm_delete(request, get_object_or_404(Node, pk=pk), back=reverse("node-list"),
                          done=reverse("node-list"))  # fmt: skip


@role_required(ADMIN)
def user_delete(request, pk: int):
    return confirm_delete(request, get_object_or_404(get_user_model(), pk=pk), back=reverse("user-list"),
                          done=reverse("user-list"))  # fmt: skip
