"""Number formatting and small table helpers shared by the summary and diff views.

Values are formatted to three significant digits in a human unit (``ns``, ``µs``,
``ms``, ``s`` for times; plain, ``k``, ``M``, ``G`` for cycle counts) so that columns
stay narrow enough for an 80-column terminal.
"""
from __future__ import annotations

import math

from rich import box
from rich.table import Table

_TIME_UNITS = (("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9))
_COUNT_UNITS = (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12))


def _three_digits(value: float) -> str:
    """``value`` (>= 0, < 1000 after scaling) with three significant digits."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _scaled(value: float, units: tuple[tuple[str, float], ...], sep: str) -> str:
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value == int(value) and value < 1000:  # whole small numbers print as they are
        return f"{sign}{int(value)}{sep}{units[0][0]}".rstrip()
    chosen = units[0]
    for unit in units:
        if value >= unit[1]:
            chosen = unit
    scaled = value / chosen[1]
    text = _three_digits(scaled)
    if float(text) >= 1000 and chosen is not units[-1]:  # 999.7 rounds to 1000: next unit up
        chosen = units[units.index(chosen) + 1]
        text = _three_digits(value / chosen[1])
    return f"{sign}{text}{sep}{chosen[0]}".rstrip()


def fmt_ns(value: float | int | None) -> str:
    """A duration in nanoseconds as ``850 ns``, ``12.3 µs``, ``1.05 ms``, ``2.00 s``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return _scaled(float(value), _TIME_UNITS, " ")


def fmt_cycles(value: float | int | None) -> str:
    """A cycle count as ``850``, ``12.3k``, ``1.05M``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return _scaled(float(value), _COUNT_UNITS, "")


def fmt_count(value: int | None) -> str:
    """An integer count, exact below one million, then ``1.23M``."""
    if value is None:
        return "-"
    return str(int(value)) if abs(value) < 1_000_000 else fmt_cycles(value)


def fmt_share(value: float | None) -> str:
    """A fraction as a percentage: ``42.1%``."""
    if value is None or math.isnan(value):
        return "-"
    return f"{100 * value:.1f}%"


def fmt_pct(value: float | None) -> str:
    """A relative change in percent with its sign: ``+12.3%``, ``-4.0%``."""
    if value is None or math.isnan(value) or math.isinf(value):
        return "-"
    return f"{round(value, 1) + 0.0:+.1f}%"  # + 0.0: a change that rounds to zero reads +0.0%, not -0.0%


def compact_table(title: str | None = None, caption: str | None = None) -> Table:
    """A table without vertical rules: the narrowest layout rich offers."""
    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                 title_justify="left", caption_justify="left", show_edge=False, collapse_padding=True)
