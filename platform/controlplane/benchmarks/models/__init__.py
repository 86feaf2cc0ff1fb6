from controlplane.benchmarks.models.benchmark_run import BenchmarkRun, StaleRunState
from controlplane.benchmarks.models.benchmark_schedule import BenchmarkSchedule

__all__ = ["BenchmarkRun", "BenchmarkSchedule", "StaleRunState"]
