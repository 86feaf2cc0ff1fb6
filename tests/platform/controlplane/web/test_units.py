from controlplane.web.templatetags.units import count


def test_count_keeps_three_significant_digits_in_thousands_units():
    assert count(15_706_484_224) == "15.7 B"
    assert count(2_451_434_496) == "2.45 B"
    assert count(671_026_426_880) == "671 B"
    assert count(819_840) == "820 K"
    assert count(999_600) == "1 M"  # rounding up to 1,000 of a unit moves to the next
    assert count(999) == "999"
    assert count(None) == ""
