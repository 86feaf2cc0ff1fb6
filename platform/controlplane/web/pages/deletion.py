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
from controlplane.web.access import role_required


def _blockers(exc: ProtectedError | RestrictedError) -> list[tuple[str, str]]:
    objects = exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
    return sorted((obj._meta.verbose_name, str(obj)) for obj in objects)


def confirm_delete(request, obj, *, back: str, done: str):
    """GET: what is about to go and a confirm button; POST: delete, or 409 naming what blocks it."""
    context = {"object": obj, "kind": obj._meta.verbose_name, "back": back}
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


@role_required(ADMIN)
def node_delete(request, pk: int):
    return confirm_delete(request, get_object_or_404(Node, pk=pk), back=reverse("node-list"),
                          done=reverse("node-list"))  # fmt: skip


@role_required(ADMIN)
def user_delete(request, pk: int):
    return confirm_delete(request, get_object_or_404(get_user_model(), pk=pk), back=reverse("user-list"),
                          done=reverse("user-list"))  # fmt: skip
