"""The control plane dashboard: its web requests and database queries, and its Celery tasks and
queues.

Metric names: django-prometheus (``django_http_*``, ``django_db_*``) and the queue depth
(``chassis_celery_queue_length``) come from the control plane's /metrics; task outcomes and
durations (``chassis_celery_tasks_total``, ``chassis_celery_task_duration_seconds``) from the
Celery workers' metrics port (controlplane/telemetry/celery_metrics.py).
"""

from __future__ import annotations

from dashboards.panels import Panel, Query, Row, dashboard, histogram_quantile, query_variable

UID = "chassis-control-plane"
RATE = "[$__rate_interval]"
TASK = 'task=~"$task"'


def _web() -> Row:
    return Row(
        "Web requests",
        [
            Panel(
                "Requests/s by view",
                (
                    Query(
                        f"sum by (view) (rate(django_http_requests_total_by_view_transport_method_total{RATE}))",
                        "{{view}}",
                    ),
                ),  # fmt: skip
                unit="reqps",
                description="Every web process of the control plane, summed (UI pages, REST API, /metrics).",
            ),
            Panel(
                "Responses/s by status",
                (
                    Query(
                        f"sum by (status) (rate(django_http_responses_total_by_status_view_method_total{RATE}))",
                        "{{status}}",
                    ),
                ),  # fmt: skip
                unit="reqps",
            ),
            Panel(
                "Request time by view (p50 / p99)",
                tuple(
                    Query(
                        histogram_quantile(
                            q, "django_http_requests_latency_seconds_by_view_method", "view", ""
                        ),
                        f"p{int(q * 100)} {{{{view}}}}",
                    )  # fmt: skip
                    for q in (0.5, 0.99)
                ),
                unit="s",
                description="From the view's middleware in to the response out (django-prometheus).",
            ),
            Panel(
                "Unhandled exceptions/s by type",
                (
                    Query(
                        f"sum by (type) (rate(django_http_exceptions_total_by_type_total{RATE}))", "{{type}}"
                    ),
                ),
                description="Exceptions that reached Django's handler: each one is a 500.",
            ),
        ],
    )


def _database() -> Row:
    return Row(
        "Database",
        [
            Panel(
                "Queries/s",
                (Query(f"sum by (job, alias) (rate(django_db_execute_total{RATE}))", "{{job}} {{alias}}"),),
                unit="ops",
                description="By scrape job: the web processes (chassis-control-plane-metrics) and the "
                "Celery workers' tasks (chassis-celery-workers).",
            ),
            Panel(
                "Query time (p50 / p99)",
                tuple(
                    Query(
                        histogram_quantile(q, "django_db_query_duration_seconds", "job", ""),
                        f"p{int(q * 100)} {{{{job}}}}",
                    )
                    for q in (0.5, 0.99)
                ),
                unit="s",
            ),
            Panel(
                "Query errors/s by type",
                (Query(f"sum by (job, type) (rate(django_db_errors_total{RATE}))", "{{job}} {{type}}"),),
            ),
            Panel(
                "New connections/s (and errors)",
                (
                    Query(f"sum(rate(django_db_new_connections_total{RATE}))", "connections"),
                    Query(f"sum(rate(django_db_new_connection_errors_total{RATE}))", "errors"),
                ),
                description="DATABASE_CONN_MAX_AGE=0 opens one connection per request.",
            ),
        ],
    )


def _celery() -> Row:
    return Row(
        "Celery",
        [
            Panel(
                "Tasks/s by task and outcome",
                (
                    Query(
                        f"sum by (task, outcome) (rate(chassis_celery_tasks_total{{{TASK}}}{RATE}))",
                        "{{task}} {{outcome}}",
                    ),
                ),  # fmt: skip
                unit="ops",
            ),
            Panel(
                "Task run time by task (p50 / p95)",
                tuple(
                    Query(
                        histogram_quantile(q, "chassis_celery_task_duration_seconds", "task", TASK),
                        f"p{int(q * 100)} {{{{task}}}}",
                    )
                    for q in (0.5, 0.95)
                ),
                unit="s",
            ),
            Panel(
                "Failed tasks/s by task",
                (
                    Query(
                        f'sum by (task) (rate(chassis_celery_tasks_total{{outcome="failed", {TASK}}}{RATE}))',
                        "{{task}}",
                    ),
                ),  # fmt: skip
            ),
            Panel(
                "Queue length by queue",
                (Query("max by (queue) (chassis_celery_queue_length)", "{{queue}}"),),
                description="Messages no worker has taken yet, read from the broker at each scrape. "
                "A growing node.<name> queue: that node's agent is not consuming.",
            ),
            Panel(
                "Broker reachable",
                (Query("min(chassis_celery_broker_up)", "broker"),),
                kind="stat",
                max_value=1,
                width=6,
            ),
            Panel(
                "Benchmark schedules regressed",
                (Query("sum(chassis_benchmark_regressed)", "regressed"),),
                kind="stat",
                width=6,
                description="Schedules whose latest run regressed against its baseline runs.",
            ),
        ],
    )


def build() -> dict:
    variables = [query_variable("task", "Task", "label_values(chassis_celery_tasks_total, task)")]
    return dashboard(
        UID,
        "Chassis control plane",
        "The control plane (Django and Celery): requests, database queries, tasks and queues.",
        [_web(), _database(), _celery()],
        variables,
    )
