"""List pages: a django-tables2 table over a django-filter filter set, with paging, sorting by any
column header, a search box and the same rows as CSV (``?export=csv``, every page, filters kept)."""

from __future__ import annotations

import csv

import django_filters
import django_tables2 as tables
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import render
from django.utils.text import capfirst

from controlplane.api.filtersets import ChassisFilterSet

PER_PAGE = 25


class WhenColumn(tables.DateTimeColumn):
    """A date and time in UTC, ISO-like, kept on one line."""

    def __init__(self, **kwargs):
        super().__init__(format="Y-m-d H:i:s", attrs={"td": {"class": "when"}}, **kwargs)


class ChassisTable(tables.Table):
    class Meta:
        template_name = "web/_table.html"
        attrs = {"class": "data"}


class SearchFilterSet(ChassisFilterSet):
    """``q`` matches any of ``search_fields`` (case-insensitive substring)."""

    search_fields: tuple[str, ...] = ()
    q = django_filters.CharFilter(method="search", label="Search")

    def search(self, queryset, name, value):
        words = value.strip()
        if not words:
            return queryset
        match = Q()
        for field in self.search_fields:
            match |= Q(**{f"{field}__icontains": words})
        return queryset.filter(match)


def csv_response(table: tables.Table, filename: str) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
    writer = csv.writer(response)
    rows = table.as_values(exclude_columns=getattr(table, "exclude_from_export", ()))
    writer.writerow([capfirst(str(name)) for name in next(rows)])  # as the page shows them (app.css)
    writer.writerows(rows)
    return response


def table_page(request, *, table_class, filterset_class, queryset, title: str, template="web/table_page.html",
               context: dict | None = None, status: int = 200):  # fmt: skip
    """The page (or its CSV) for ``queryset`` filtered by the request's query string."""
    filterset = filterset_class(request.GET or None, queryset=queryset, request=request)
    filterset.form.auto_id = "filter-%s"  # apart from the ids of the page's other forms
    rows = filterset.qs if filterset.is_bound and filterset.is_valid() else queryset
    table = table_class(rows, request=request)
    if request.GET.get("export") == "csv":
        tables.RequestConfig(request, paginate=False).configure(table)  # the sort, every page
        return csv_response(table, title.lower().replace(" ", "-"))
    tables.RequestConfig(request, paginate={"per_page": PER_PAGE}).configure(table)
    export_query = request.GET.copy()
    export_query["export"] = "csv"
    export_query.pop(table.prefixed_page_field, None)
    return render(
        request,
        template,
        {"title": title, "table": table, "filter": filterset, "export_query": export_query.urlencode(),
         **(context or {})},
        status=status,
    )  # fmt: skip
