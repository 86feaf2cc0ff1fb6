"""Median and median absolute deviation: a noise band that one outlier run cannot widen."""

from __future__ import annotations

from collections.abc import Iterable

from measurement.percentile import percentile

# MAD times this estimates the standard deviation of normally distributed values.
MAD_TO_SIGMA = 1.4826


def median_mad(values: Iterable[float]) -> tuple[float, float] | None:
    """(median, MAD) of ``values``; None when there are none."""
    ordered = [float(v) for v in values]
    if not ordered:
        return None
    median = percentile(ordered, 50)
    return median, percentile((abs(v - median) for v in ordered), 50)
