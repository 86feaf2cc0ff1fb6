"""Limit/offset pagination whose parameters are checked before they reach the database."""

from __future__ import annotations

from rest_framework import pagination
from rest_framework.exceptions import ValidationError

# PostgreSQL's LIMIT and OFFSET are bigints: a larger number is a database error, not an empty page.
_LARGEST = 2**63 - 1


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    def get_limit(self, request):
        self._check(request, self.limit_query_param)
        return super().get_limit(request)

    def get_offset(self, request):
        self._check(request, self.offset_query_param)
        return super().get_offset(request)

    @staticmethod
    def _check(request, param: str) -> None:
        given = request.query_params.get(param, "").strip()
        if given.isdigit() and int(given) > _LARGEST:
            raise ValidationError({param: [f"Ensure this value is less than or equal to {_LARGEST}."]})
