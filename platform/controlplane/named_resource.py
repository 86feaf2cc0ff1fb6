"""The abstract model of what users create and edit by name (a deployment, a benchmark schedule)."""

from __future__ import annotations

from django.db import models


class NamedResource(models.Model):
    """Named by a unique slug, listed by name, with its creation and last edit times."""

    name = models.SlugField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
