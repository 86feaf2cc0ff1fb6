"""Template filters for figures people read at a glance."""

from django import template

register = template.Library()

COUNT_UNITS = ("", " K", " M", " B", " T")


@register.filter
def count(value: int | None) -> str:
    """A count in three significant digits: 15,706,484,224 -> "15.7 B"; "" for None."""
    if value is None:
        return ""
    scaled, power = float(value), 0
    while abs(float(f"{scaled:.3g}")) >= 1000 and power < len(COUNT_UNITS) - 1:
        scaled, power = scaled / 1000, power + 1
    return f"{scaled:.3g}{COUNT_UNITS[power]}"
