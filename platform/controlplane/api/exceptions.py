"""The API's exception handler (DRF's own, plus a 409 for deleting what other objects still use) and
the site's 404 view."""

from __future__ import annotations

from django.db.models import ProtectedError, RestrictedError
from django.http import JsonResponse
from django.views.defaults import page_not_found
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class ReferenceSerializer(serializers.Serializer):
    type = serializers.CharField(help_text="app_label.model of the referencing object")
    id = serializers.IntegerField()
    name = serializers.CharField()


class StillReferencedSerializer(serializers.Serializer):
    """The 409 body of a delete refused because other objects still reference the object."""

    detail = serializers.CharField()
    referenced_by = ReferenceSerializer(many=True)


def exception_handler(exc, context):
    if isinstance(exc, ProtectedError | RestrictedError):
        objects = exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
        referenced_by = sorted(
            ({"type": obj._meta.label_lower, "id": obj.pk, "name": str(obj)} for obj in objects),
            key=lambda ref: (ref["type"], ref["id"]),
        )
        detail = "Cannot delete: other objects still reference it; delete or change them first."
        return Response({"detail": detail, "referenced_by": referenced_by}, status=status.HTTP_409_CONFLICT)
    return drf_exception_handler(exc, context)


def not_found(request, exception=None):
    """The site's 404 view: JSON under /api/ (a URL no route matches, such as a non-numeric id),
    Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    return page_not_found(request, exception)
