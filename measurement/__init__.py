"""The one measurement module of Chassis's benchmarks and load tests: one percentile definition,
summaries built on it, and one SSE stream timer (TTFT at the first content token, ITL, end to end).

Pure Python, importing nothing of Chassis: the engine bench, the gateway bench, the control plane's
benchmarks and the Locust files all use it.
"""

from measurement.percentile import percentile
from measurement.spread import MAD_TO_SIGMA, median_mad
from measurement.sse import StreamRecord, StreamTimer, atime_stream, time_stream
from measurement.summary import Summary

__all__ = [
    "MAD_TO_SIGMA",
    "StreamRecord",
    "StreamTimer",
    "Summary",
    "atime_stream",
    "median_mad",
    "percentile",
    "time_stream",
]
