from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.api import audit
from controlplane.api.roles import OPERATOR
from controlplane.serving import services
from controlplane.serving.choices import ReplicaState, user_actor
from controlplane.serving.forms import DeploymentForm, RevisionForm, ScaleForm
from controlplane.serving.launcher import log_tail
from controlplane.serving.models import Deployment, Replica, StaleReplicaState
from controlplane.web.access import role_required
from controlplane.web.pages import deployment_charts
from controlplane.web.pages.catalog import deployment_table_page


@role_required()
def deployment_list(request):
    return deployment_table_page(request, DeploymentForm())


@require_POST
@role_required(OPERATOR)
def deployment_create(request):
    form = DeploymentForm(request.POST)
    if not form.is_valid():
        return deployment_table_page(request, form, status=400)
    with transaction.atomic():
        deployment = form.save()
        audit.record(request.user, "create", deployment, form.cleaned_data)
        services.save_spec(deployment, user_actor(request.user))
    return redirect("deployment-detail", pk=deployment.pk)


def _detail_context(deployment, request, scale_form=None, revision_form=None):
    replicas = deployment.replica_set.select_related("node", "revision").order_by("ordinal")
    chosen = request.GET.get("replica")
    log_replica = (
        replicas.filter(pk=chosen).first()
        if chosen and chosen.isdigit()
        else replicas.exclude(log_path="").last()
    )
    return {
        "deployment": deployment,
        "replicas": replicas.exclude(state=ReplicaState.STOPPED),
        "stopped_count": replicas.filter(state=ReplicaState.STOPPED).count(),
        "events": deployment_events(deployment)[:50],
        "scale_form": scale_form or ScaleForm(initial={"replicas": deployment.replicas}),
        "revision_form": revision_form or RevisionForm(instance=deployment),
        "revisions": deployment.revisions.select_related("checkpoint")[:10],
        "log_replica": log_replica,
        "log_tail": log_tail(log_replica.log_path) if log_replica and log_replica.log_path else "",
        "role_groups": role_groups(deployment),
    }


def role_groups(deployment):
    """The deployments serving this one's model name, by role: with a prefill and a decode one, the
    model's disaggregated replica groups (gateway/disaggregation.py)."""
    from django.db.models import Count, Q

    ready = Count("replica_set", filter=Q(replica_set__state=ReplicaState.READY))
    siblings = Deployment.objects.filter(served_model_name=deployment.served_model_name)
    return list(siblings.annotate(ready=ready).order_by("role", "name"))


def deployment_events(deployment):
    from controlplane.serving.models import ReplicaEvent

    return (
        ReplicaEvent.objects.filter(replica__deployment=deployment)
        .select_related("replica__deployment")
        .order_by("-at", "-id")
    )


@role_required()
def deployment_detail(request, pk: int):
    deployment = get_object_or_404(Deployment, pk=pk)
    return render(request, "web/deployment_detail.html", _detail_context(deployment, request))


@role_required()
def deployment_live(request, pk: int):
    """The htmx-polled part of the detail page: replicas, events, log tail."""
    deployment = get_object_or_404(Deployment, pk=pk)
    return render(request, "web/_deployment_live.html", _detail_context(deployment, request))


@require_POST
@role_required(OPERATOR)
def deployment_scale(request, pk: int):
    deployment = get_object_or_404(Deployment, pk=pk)
    form = ScaleForm(request.POST)
    if not form.is_valid():
        return render(
            request, "web/deployment_detail.html", _detail_context(deployment, request, form), status=400
        )
    before = deployment.replicas
    services.scale(deployment, form.cleaned_data["replicas"])
    audit.record(request.user, "scale", deployment, {"replicas": [before, deployment.replicas]})
    return redirect("deployment-detail", pk=pk)


@require_POST
@role_required(OPERATOR)
def deployment_revise(request, pk: int):
    """A new checkpoint, engine options or TP size: a rolling update to a new revision."""
    deployment = get_object_or_404(Deployment, pk=pk)
    form = RevisionForm(request.POST, instance=deployment)
    if not form.is_valid():
        deployment.refresh_from_db()
        context = _detail_context(deployment, request, revision_form=form)
        return render(request, "web/deployment_detail.html", context, status=400)
    with transaction.atomic():
        form.save()
        if services.save_spec(deployment, user_actor(request.user)):
            audit.record(request.user, "update", deployment, form.cleaned_data)
    return redirect("deployment-detail", pk=pk)


@require_POST
@role_required(OPERATOR)
def deployment_restart(request, pk: int):
    deployment = get_object_or_404(Deployment, pk=pk)
    count = services.restart_deployment(deployment, user_actor(request.user))
    audit.record(request.user, "restart", deployment, {"replicas": count})
    return redirect("deployment-detail", pk=pk)


@require_POST
@role_required(OPERATOR)
def deployment_rollback(request, pk: int, number: int):
    deployment = get_object_or_404(Deployment, pk=pk)
    try:
        services.roll_back(deployment, number, user_actor(request.user))
    except ValidationError as exc:
        deployment.refresh_from_db()
        context = {**_detail_context(deployment, request), "rollback_error": " ".join(exc.messages)}
        return render(request, "web/deployment_detail.html", context, status=400)
    audit.record(request.user, "rollback", deployment, {"revision": number})
    return redirect("deployment-detail", pk=pk)


@require_POST
@role_required(OPERATOR)
def replica_action(request, pk: int, replica_pk: int, verb: str):
    if verb not in ("drain", "restart"):
        raise Http404(f"no replica action {verb!r}")
    replica = get_object_or_404(Replica, pk=replica_pk, deployment_id=pk)
    actor = user_actor(request.user)
    try:
        if verb == "drain":
            services.drain_replica(replica, f"drain requested by {actor}", actor)
        else:
            services.restart_replica(replica, actor)
    except (ValueError, StaleReplicaState):
        pass  # it moved meanwhile; the page shows the state it is in
    audit.record(request.user, verb, replica.deployment, {"replica": replica.pk})
    return redirect("deployment-detail", pk=pk)


@role_required()
def deployment_samples(request, pk: int):
    """Chart data: each series aggregated over the replicas per time bucket (web/pages/deployment_charts.py)."""
    return deployment_charts.series_response(request, get_object_or_404(Deployment, pk=pk))
