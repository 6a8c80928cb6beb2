"""Typed field readers that gather problems with their key paths instead of raising.

Each reader returns the checked value, or ``None`` after recording a problem (a value that
the YAML reader already reported is ``INVALID`` and is skipped silently). Messages are short
and stable: tests compare them exactly.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal
from typing import NamedTuple

from kernel_contracts.contracts.document import INVALID
from kernel_contracts.contracts.errors import Problem

__all__ = [
    "ID_PATTERN",
    "VALUE_CUTOFF",
    "Checker",
    "Interval",
    "check_temperature",
    "closest",
    "describe",
    "did_you_mean",
    "param_range",
    "show",
    "sub",
    "valid_band",
]

ID_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def check_temperature(temperature: float) -> float:
    """``temperature`` when it is a sampling temperature (finite and > 0, as a contract's
    ``policy.temperature``); a ``ValueError`` quoting it otherwise. For functions that take one
    as an argument (the kernels' measurement, rollouts and bias estimates)."""
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be positive and finite, got {temperature}")
    return temperature


def sub(key: str, name: str | int) -> str:
    """The key path of ``name`` (a key or a list index) inside ``key``."""
    if isinstance(name, int):
        return f"{key}[{name}]"
    return f"{key}.{name}" if key else name


# How alike (difflib's ratio) a value must be to a choice to be offered as its spelling.
# Stricter than for keys (0.6): a value that is another word must not be offered a choice of
# different meaning (``median`` is 0.8 alike ``mean``, ``float8_e4m3fn`` 0.6 alike
# ``float32``), while a slip of one or two characters is (``tiss``: ``tis`` 0.86,
# ``h100_fp8``: ``h100-fp8`` 0.88).
VALUE_CUTOFF = 0.85


def closest(name: str, choices, cutoff: float = 0.6) -> str | None:
    """The choice closest to ``name`` (letter case aside), or ``None`` when none is ``cutoff``
    alike."""
    by_lower = {}
    for choice in sorted(choices):
        by_lower.setdefault(choice.lower(), choice)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[close[0]] if close else None


def did_you_mean(name: str, choices, cutoff: float = 0.6) -> str:
    """`` (did you mean 'X'?)`` for the choice closest to ``name`` (letter case aside), or
    ``""`` when none is close."""
    close = closest(name, choices, cutoff)
    return f" (did you mean '{close}'?)" if close else ""


def show(value: object) -> str:
    """A short YAML-like rendering of a scalar for messages."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, int):
        text = str(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    return describe(value)


def describe(value: object) -> str:
    """What kind of value this is, with the value itself when it is a scalar."""
    if value is INVALID:
        return "an invalid value"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if value is True or value is False:
        return f"boolean {show(value)}"
    if isinstance(value, int):
        return f"integer {show(value)}"
    if isinstance(value, float):
        return f"number {show(value)}"
    return f"string {show(value)}"


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _interval(lo, hi, lo_open, hi_open) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_bound(lo)}, {_bound(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_bound(lo)}"
    return f"{'<' if hi_open else '<='} {_bound(hi)}"


class Interval(NamedTuple):
    """The values a number may take: ``str`` is how messages say it (``> 1``, ``in (0, 1)``)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, value: object) -> bool:
        lo, hi = self.lo, self.hi
        low = lo is not None and (value <= lo if self.lo_open else value < lo)
        high = hi is not None and (value >= hi if self.hi_open else value > hi)
        return not (low or high)

    def __str__(self) -> str:
        return _interval(self.lo, self.hi, self.lo_open, self.hi_open)


# (estimator, parameter) -> the values the parameter may take; the estimator "" stands for
# every estimator without an entry of its own. mis masks w > c, so its cap must exceed 1
# (as dual_clip's ratio c, the lower bound of the surrogate for A < 0);
# truncation takes any c >= 0 (c = 0 gives weight 0); tis_norm's bound is for c > 1.
# A band (lo, hi) needs 0 <= lo < 1 < hi.
_PARAM_RANGES = {
    ("mis", "cap"): Interval(1, None, lo_open=True),
    ("", "cap"): Interval(0),
    ("tis_norm", "cap"): Interval(1, None, lo_open=True),
    ("", "clip_epsilon"): Interval(0, 1, lo_open=True, hi_open=True),
    ("dual_clip", "cap"): Interval(1, None, lo_open=True),
    ("tv_mask", "threshold"): Interval(0, 1, lo_open=True, hi_open=True),
    ("dppo_tv", "threshold"): Interval(0, 1, lo_open=True, hi_open=True),
    ("", "threshold"): Interval(0, None, lo_open=True),
    ("", "cov_fraction"): Interval(0, 1, lo_open=True),
    ("", "kl_coef"): Interval(0),
}


def param_range(estimator: str | None, key: str) -> Interval:
    """The values the numeric parameter ``key`` (``cap``, ``clip_epsilon``, ``threshold``) may
    take with ``estimator``: the one rule the contract reader and the kernels' estimators apply."""
    return _PARAM_RANGES.get((estimator or "", key)) or _PARAM_RANGES["", key]


def valid_band(lo: float, hi: float) -> bool:
    """The rule of a ``band`` (lo, hi): 0 <= lo < 1 < hi."""
    return 0 <= lo < 1 < hi


class Checker:
    """Collects problems for one file; ``where`` finds the nearest located key path."""

    def __init__(self, path: str, locations: Mapping[str, tuple[int, int]], root=(1, 1)):
        self.path = path
        self.locations = locations
        self.root = root
        self.problems: list[Problem] = []
        self.failures = 0  # problems reported here plus values the YAML reader already refused

    def where(self, key: str) -> tuple[int, int]:
        path = key
        while path:
            if path in self.locations:
                return self.locations[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.root

    def report(self, key: str, message: str) -> None:
        self.failures += 1
        self.problems.append(Problem(self.path, *self.where(key), key, message))

    def expected(self, key: str, what: str, value: object) -> None:
        if value is INVALID:
            self.failures += 1
        else:
            self.report(key, f"expected {what}, got {describe(value)}")

    # -- containers ------------------------------------------------------------------------

    def mapping(
        self, value: object, key: str, fields: Collection[str], required: Collection[str] = ()
    ) -> dict | None:
        """A mapping with only ``fields`` as keys and every key of ``required`` present."""
        if not isinstance(value, dict):
            self.expected(key, "a mapping", value)
            return None
        for name in value:
            if name not in fields:
                self.report(sub(key, name), f"unknown key{did_you_mean(str(name), fields)}")
        for name in required:
            if name not in value:
                self.report(sub(key, name), "missing required key")
        return {k: v for k, v in value.items() if k in fields}

    def items(self, value: object, key: str, *, nonempty: bool = False) -> list | None:
        if not isinstance(value, list):
            self.expected(key, "a list", value)
            return None
        if nonempty and not value:
            self.report(key, "must not be empty")
        return value

    def each(self, value: object, key: str, read: Callable, *, nonempty=False) -> tuple | None:
        """A list read item by item with ``read(item, item_key)``; ``None`` if any fails."""
        items = self.items(value, key, nonempty=nonempty)
        if items is None:
            return None
        out = [read(item, sub(key, i)) for i, item in enumerate(items)]
        return None if any(x is None for x in out) else tuple(out)

    # -- scalars ---------------------------------------------------------------------------

    def number(self, value, key, lo=None, hi=None, *, lo_open=False, hi_open=False):
        """A finite number (an integer is accepted), optionally within an interval."""
        if value is INVALID:
            self.failures += 1
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.expected(key, "a number", value)
            return None
        if isinstance(value, int):
            try:
                as_float = float(value)
            except OverflowError:
                self.report(key, f"{show(value)} is too large for a double-precision number")
                return None
            if Decimal(value) != Decimal(repr(as_float)):
                self.report(
                    key,
                    f"{show(value)} has more digits than a double-precision number holds "
                    f"(it would be read as {as_float!r})",
                )
                return None
            value = as_float
        if not math.isfinite(value):
            self.report(key, f"must be a finite number, got {show(value)}")
            return None
        low = lo is not None and (value <= lo if lo_open else value < lo)
        high = hi is not None and (value >= hi if hi_open else value > hi)
        if low or high:
            self.report(key, f"must be {_interval(lo, hi, lo_open, hi_open)}, got {show(value)}")
            return None
        return value

    def integer(self, value, key, lo=None, hi=None):
        if value is INVALID:
            self.failures += 1
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.expected(key, "an integer", value)
            return None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.report(key, f"must be {_interval(lo, hi, False, False)}, got {show(value)}")
            return None
        return value

    def boolean(self, value, key):
        if value is True or value is False:
            return value
        self.expected(key, "true or false", value)
        return None

    def string(self, value, key, *, nonempty: bool = True):
        if not isinstance(value, str):
            self.expected(key, "a string", value)
            return None
        if nonempty and not value.strip():
            self.report(key, "must not be empty")
            return None
        return value

    def choice(self, value, key, options: Collection[str]):
        if not isinstance(value, str):
            self.expected(key, "a string", value)
            return None
        if value not in options:
            hint = did_you_mean(value, options, VALUE_CUTOFF)
            self.report(key, f"expected one of {', '.join(options)}; got {show(value)}{hint}")
            return None
        return value

    def ident(self, value, key):
        text = self.string(value, key)
        if text is None:
            return None
        if not ID_PATTERN.match(text):
            self.report(
                key,
                f"{show(text)} is not a valid id (a letter, then letters, digits, _ . -)",
            )
            return None
        return text

    def pair(self, value, key, read: Callable, *, open_ends: bool):
        """``[lo, hi]`` with lo <= hi; ``null`` stands for an open end when ``open_ends``."""
        if not isinstance(value, list):
            self.expected(key, "a list [lo, hi]", value)
            return None
        if len(value) != 2:
            self.report(key, f"expected a list [lo, hi] of 2 items, got {len(value)} items")
            return None
        ends = []
        for i, end in enumerate(value):
            if end is None and open_ends:
                ends.append(None)
                continue
            x = read(end, sub(key, i))
            if x is None:
                return None
            ends.append(x)
        lo, hi = ends
        if lo is not None and hi is not None and lo > hi:
            self.report(key, f"lo must be <= hi, got [{show(lo)}, {show(hi)}]")
            return None
        return lo, hi
