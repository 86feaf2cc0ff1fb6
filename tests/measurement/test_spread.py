from measurement import median_mad


def test_median_and_mad_ignore_one_outlier():
    assert median_mad([100.0, 110.0, 90.0, 105.0, 95.0]) == (100.0, 5.0)
    assert median_mad([100.0, 110.0, 90.0, 105.0, 9000.0]) == (105.0, 5.0)


def test_even_counts_interpolate_and_nothing_gives_none():
    assert median_mad([1, 2, 3, 4]) == (2.5, 1.0)
    assert median_mad([7.0]) == (7.0, 0.0)
    assert median_mad([]) is None
