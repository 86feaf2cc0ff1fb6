"""p50/p90/p99/mean of a set of measurements, all percentiles from ``measurement.percentile``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from measurement.percentile import percentile


@dataclass(frozen=True)
class Summary:
    """Figures of a set of values; every figure is None when the set is empty."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Iterable[float]) -> Summary:
        ordered = sorted(values)
        if not ordered:
            return cls(0, None, None, None, None, None)
        return cls(
            count=len(ordered),
            mean=sum(ordered) / len(ordered),
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
            max=float(ordered[-1]),
        )
