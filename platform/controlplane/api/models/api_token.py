from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

# last_used is written at most this often per token: a script calling the API in a loop does not
# turn every read into a database write.
LAST_USED_RESOLUTION = timedelta(seconds=60)
PREFIX_LENGTH = 8


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    """A bearer token of one user. Only its SHA-256 is stored: the key is shown once, when issued."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What it is for, such as the script that uses it.")
    prefix = models.CharField(
        max_length=PREFIX_LENGTH, help_text="The key's first characters, to recognise it."
    )
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, name: str) -> tuple[ApiToken, str]:
        """A new token and its key (the only time the key is known)."""
        key = secrets.token_hex(20)
        token = cls.objects.create(user=user, name=name, prefix=key[:PREFIX_LENGTH], digest=digest_of(key))
        return token, key

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])

    def mark_used(self) -> None:
        now = timezone.now()
        if self.last_used is None or now - self.last_used >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=self.pk).update(last_used=now)
            self.last_used = now
