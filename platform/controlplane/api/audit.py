"""Recording audit entries from API viewsets and UI views alike."""

from __future__ import annotations

from django.db import models, transaction

from controlplane.api.models import AuditEntry


def _plain(value):
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)) or hasattr(value, "all"):
        items = value.all() if hasattr(value, "all") else value
        return [_plain(item) for item in items]
    return value


def _entry(user, action: str, obj: models.Model, changes: dict | None = None) -> AuditEntry:
    secret_free = {key: value for key, value in (changes or {}).items() if key != "password"}
    return AuditEntry(
        user=user if user is not None and user.is_authenticated else None,
        username=user.get_username() if user is not None and user.is_authenticated else "system",
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk or ""),
        object_repr=str(obj)[:200],
        changes=_plain(secret_free),
    )


def record(user, action: str, obj: models.Model, changes: dict | None = None) -> AuditEntry:
    entry = _entry(user, action, obj, changes)
    entry.save()
    return entry


def delete(user, obj: models.Model) -> AuditEntry:
    """Delete ``obj``, then record who did: a delete refused (ProtectedError, RestrictedError: other
    objects still reference it) raises before anything is recorded."""
    entry = _entry(user, "delete", obj)  # before the delete, which clears obj.pk
    if (
        entry.user_id is not None
        and obj._meta.label_lower == entry.user._meta.label_lower
        and obj.pk == entry.user_id
    ):
        entry.user = None  # a user deleting themselves: the entry keeps the username, not a dangling key
    with transaction.atomic():
        obj.delete()
        entry.save()
    return entry
