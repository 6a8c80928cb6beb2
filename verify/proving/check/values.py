"""What a report's JSON value must be before ``check`` compares it: a count or a real."""

from __future__ import annotations

import math

__all__ = ["is_count", "is_real"]


def is_count(value) -> bool:
    """A non-negative integer (a JSON boolean is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_real(value) -> bool:
    """A finite number (a JSON boolean is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
