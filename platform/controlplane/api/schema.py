"""The OpenAPI schema documents the error answers every operation can give, not only its success."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

_BODY_METHODS = {"POST", "PUT", "PATCH"}


class ErrorSerializer(serializers.Serializer):
    """DRF's error body: one sentence that says what went wrong."""

    detail = serializers.CharField()


_VALIDATION = OpenApiResponse(
    OpenApiTypes.OBJECT, description="Invalid input: each offending field (or `detail`) with its messages"
)
_ERRORS = {
    "401": OpenApiResponse(ErrorSerializer, description="No or an unknown API token"),
    "403": OpenApiResponse(ErrorSerializer, description="The token's role does not allow this"),
    "429": OpenApiResponse(ErrorSerializer, description="Too many requests; retry after `Retry-After` seconds"),
}
_NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such object")
_UNSUPPORTED = OpenApiResponse(ErrorSerializer, description="The body's media type is not JSON or a form")


class ChassisAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        errors = dict(_ERRORS)
        if self.method in _BODY_METHODS or self._is_list_view():
            errors["400"] = _VALIDATION
        if self.method in _BODY_METHODS:
            errors["415"] = _UNSUPPORTED
        if "{" in self.path:
            errors["404"] = _NOT_FOUND
        for code, response in errors.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code, direction=direction)
        return responses
