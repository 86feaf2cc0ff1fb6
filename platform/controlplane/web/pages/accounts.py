"""Users (admins only) and API tokens (each user their own; admins everyone's)."""

from __future__ import annotations

import django_tables2 as tables
from django.contrib.auth import get_user_model
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.api import audit
from controlplane.api.models import ApiToken
from controlplane.api.roles import ADMIN, has_role, role_of, set_role
from controlplane.web.access import role_required
from controlplane.web.pages.forms import TokenForm, UserCreateForm, UserEditForm
from controlplane.web.tables import ChassisTable, SearchFilterSet, WhenColumn, table_page


class UserTable(ChassisTable):
    username = tables.Column(linkify=("user-edit", {"pk": tables.A("pk")}))
    email = tables.Column()
    role = tables.Column(empty_values=(), orderable=False)
    is_active = tables.BooleanColumn(verbose_name="active")
    last_login = WhenColumn()
    date_joined = WhenColumn(verbose_name="joined")
    # accessor="pk": a column named after a method (delete, revoke) would call it to read the cell.
    actions = tables.TemplateColumn(
        "<a href=\"{% url 'user-delete' record.pk %}\">delete</a>",
        accessor="pk",
        orderable=False,
        verbose_name="",
    )
    exclude_from_export = ("actions",)

    class Meta(ChassisTable.Meta):
        model = get_user_model()
        fields = ["username", "email", "role", "is_active", "last_login", "date_joined"]
        row_attrs = {"id": lambda record: f"user-{record.username}"}

    def render_role(self, record):
        return role_of(record) or "no role"

    def value_role(self, record):
        return role_of(record) or ""


class UserFilter(SearchFilterSet):
    search_fields = ("username", "email")

    class Meta:
        model = get_user_model()
        fields = ["is_active"]


@role_required(ADMIN)
def user_list(request):
    form = UserCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            user = form.save(commit=False)
            user.set_password(form.cleaned_data["password"])
            user.save()
            set_role(user, form.cleaned_data["role"])
            audit.record(request.user, "create", user, {"role": form.cleaned_data["role"]})
        return redirect("user-list")
    return table_page(
        request,
        table_class=UserTable,
        filterset_class=UserFilter,
        queryset=get_user_model().objects.prefetch_related("groups").order_by("username"),
        title="Users",
        template="web/users.html",
        context={"form": form},
        status=400 if form.errors else 200,
    )


@role_required(ADMIN)
def user_edit(request, pk: int):
    user = get_object_or_404(get_user_model(), pk=pk)
    form = UserEditForm(request.POST or None, instance=user, initial={"role": role_of(user)})
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            user = form.save(commit=False)
            if form.cleaned_data["password"]:
                user.set_password(form.cleaned_data["password"])
            user.save()
            set_role(user, form.cleaned_data["role"])
            changed = [name for name in form.changed_data if name != "password"]
            changes = {name: form.cleaned_data[name] for name in changed}
            if form.cleaned_data["password"]:
                changes["password_changed"] = True
            audit.record(request.user, "update", user, changes)
        return redirect("user-list")
    return render(
        request, "web/user_edit.html", {"edited": user, "form": form}, status=400 if form.errors else 200
    )


class TokenTable(ChassisTable):
    name = tables.Column()
    user = tables.Column(accessor="user__username", verbose_name="user")
    prefix = tables.TemplateColumn("<code>{{ value }}…</code>", verbose_name="starts with")
    created = WhenColumn()
    last_used = WhenColumn(default="never")
    revoked_at = WhenColumn(default="active", verbose_name="revoked")
    actions = tables.TemplateColumn(
        '{% if not record.is_revoked %}<form method="post" action="{% url \'token-revoke\' record.pk %}" '
        'class="inline">{% csrf_token %}<button type="submit">Revoke</button></form>{% endif %}',
        accessor="pk",
        orderable=False,
        verbose_name="",
    )
    exclude_from_export = ("actions",)

    class Meta(ChassisTable.Meta):
        model = ApiToken
        fields = ["name", "user", "prefix", "created", "last_used", "revoked_at"]
        row_attrs = {"id": lambda record: f"token-{record.pk}"}


class TokenFilter(SearchFilterSet):
    search_fields = ("name", "user__username", "prefix")

    class Meta:
        model = ApiToken
        fields = []


def _tokens_of(user):
    tokens = ApiToken.objects.select_related("user")
    return tokens if has_role(user, ADMIN) else tokens.filter(user=user)


@role_required()
def token_list(request):
    form = TokenForm(request.POST or None)
    new_key = None
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            token, new_key = ApiToken.issue(request.user, form.cleaned_data["name"])
            audit.record(request.user, "create", token, {"name": token.name})
        form = TokenForm()
    return table_page(
        request,
        table_class=TokenTable,
        filterset_class=TokenFilter,
        queryset=_tokens_of(request.user),
        title="API tokens",
        template="web/tokens.html",
        context={"form": form, "new_key": new_key},
        status=400 if form.errors else 200,
    )


@require_POST
@role_required()
def token_revoke(request, pk: int):
    token = get_object_or_404(_tokens_of(request.user), pk=pk)
    with transaction.atomic():
        token.revoke()
        audit.record(request.user, "revoke", token)
    return redirect("token-list")
