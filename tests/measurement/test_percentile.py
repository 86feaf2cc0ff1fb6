"""The one percentile definition: linear interpolation between closest ranks (numpy's default)."""

import statistics

import numpy as np
import pytest

from measurement import Summary, percentile


def test_known_vectors():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4], 0) == 1.0
    assert percentile([1, 2, 3, 4], 100) == 4.0
    assert percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46.0)
    assert percentile([3, 1, 2], 50) == 2.0  # unsorted input
    assert percentile(range(1, 101), 99) == pytest.approx(99.01)


def test_empty_gives_the_default_and_one_element_is_every_percentile():
    assert percentile([], 50) is None
    assert percentile([], 99, default=0.0) == 0.0
    assert all(percentile([7.5], q) == 7.5 for q in (0, 1, 50, 99, 100))


def test_agrees_with_numpy_and_statistics_median():
    rng = np.random.default_rng(0)
    for n in (2, 3, 10, 101, 1000):
        values = list(rng.exponential(size=n))
        for q in (1, 25, 50, 90, 99, 99.9):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
        assert percentile(values, 50) == pytest.approx(statistics.median(values), rel=1e-12)


def test_q_outside_0_to_100_is_refused():
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0], 101)
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0], -1)


def test_summary_is_built_on_the_percentile():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    summary = Summary.of(values)
    assert summary.count == 5 and summary.mean == 3.0 and summary.max == 5.0
    assert (summary.p50, summary.p90, summary.p99) == tuple(percentile(values, q) for q in (50, 90, 99))
    assert Summary.of(iter([2.0])).p99 == 2.0  # a one-shot iterator is read once
    assert Summary.of([]) == Summary(0, None, None, None, None, None)
