"""Numbers in the CLI's tables: one rule everywhere (``safs run``, ``safs eval``).

``sig(x)``: ``digits`` significant digits; values of ``10**(digits-1)`` and more are rounded to
that many significant digits and written without an exponent ("5430", "12700", never
"5.43e+03"); smaller values use ``g`` formatting ("29.5", "0.123"). NaN and None are "-".
"""

from __future__ import annotations

import math
from typing import Any


def sig(value: Any, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits (module docstring); ints are written whole."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= digits - 1:
        return f"{round(value, digits - 1 - magnitude):.0f}"
    return f"{value:.{digits}g}"


def percent(fraction: Any) -> str:
    """A relative deviation (``measured / paper - 1``) as a whole percent: -0.24 -> "-24%", 0.05 -> "+5%"."""
    if fraction is None or (isinstance(fraction, float) and math.isnan(fraction)):
        return "-"
    return f"{fraction:+.0%}"
