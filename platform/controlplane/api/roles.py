"""Roles: viewer reads; operator also changes deployments, checkpoints and benchmarks; admin also
manages users and topology. A role is a Django group of the same name; superusers are admins."""

from __future__ import annotations

from django.contrib.auth.models import Group

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)  # ascending: each role can do what the ones before it can
ROLE_CHOICES = [(role, role) for role in ROLES]


def role_of(user) -> str | None:
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    for role in reversed(ROLES):
        if role in names:
            return role
    return None


def has_role(user, needed: str) -> bool:
    role = role_of(user)
    return role is not None and ROLES.index(role) >= ROLES.index(needed)


def set_role(user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
    user.groups.remove(*groups.values())
    user.groups.add(groups[role])
