"""The one percentile definition of every Chassis benchmark and load test.

Linear interpolation between closest ranks: the q-th percentile of n sorted values sits at rank
``q / 100 * (n - 1)``, and a fractional rank interpolates between its two neighbours. This is
numpy's default (``method="linear"``, Hyndman & Fan type 7), so p50 equals ``statistics.median``
and figures stay comparable with numpy-based tools such as vLLM's ``benchmark_serving``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypeVar

Default = TypeVar("Default")


def percentile(values: Iterable[float], q: float, default: Default = None) -> float | Default:
    """The ``q``-th percentile (0 <= q <= 100) of ``values``; ``default`` when there are none."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    ordered = sorted(values)
    if not ordered:
        return default
    rank = q / 100 * (len(ordered) - 1)
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    fraction = rank - below
    return float(ordered[below] + (ordered[above] - ordered[below]) * fraction)
