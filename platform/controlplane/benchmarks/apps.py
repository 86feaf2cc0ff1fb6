from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    """Benchmark runs against deployments, and schedules that repeat them to catch regressions."""

    name = "controlplane.benchmarks"
    label = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        from controlplane.benchmarks import signals  # noqa: F401  (connects the receivers)
