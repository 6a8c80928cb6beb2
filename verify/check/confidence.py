"""Recomputing a measured statistical clause's confidence bounds from the raw values its report
holds (part of ``verify check``).

The evidence itself is not re-read: what was measured is trusted, everything computed from it
is recomputed with the functions the run used (``verify.decide.verdicts``, ``bounds.stats``)
and compared exactly. Per statistic:

==========================  ============================  ====================================
statistic                   raw (trusted)                 recomputed
==========================  ============================  ====================================
exceed_rate, and the mean   ``samples`` n and             ``value`` = k/n; ``bound`` and
of a 0/1 column             ``basis.count`` k             ``lower``: Clopper–Pearson at the
                                                          clause's confidence
mean of a bounded column    ``samples``, ``value`` (the   ``bound`` and ``lower``: the
                            mean), ``basis.variance``     bounded-mean bounds on the metric's
                                                          range (``evidence.table.RANGE``)
mean, no range known        ``samples``, ``value``        no bound (``bound``, ``lower`` null)
mean, histogram summary     ``basis.sketch``              no bound (``bound``, ``lower`` null)
quantile                    ``value``, ``bound``,         the ranks (``basis``) from n, q and
                            ``lower``: the order          confidence; which bounds exist; the
                            statistics at those ranks     order of the three values
max                         ``value``: the sample max     ``bound`` = ``value``; no ``lower``
==========================  ============================  ====================================
"""

from __future__ import annotations

import math

from evidence.table import RANGE
from verify.decide.verdicts import (
    BINARY,
    mean_bounds,
    quantile_lower_rank,
    rate_bounds,
)

__all__ = ["recompute"]


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _float(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _quantile(c: dict, clause, n: int, where: str, diff) -> tuple[float, float] | None:
    """Order statistics: the ranks are recomputed, the values are raw but must be ordered."""
    from bounds.stats import quantile_ucb_rank

    q, conf = float(clause.q), float(clause.confidence)
    ranks = {
        "value_rank": max(1, math.ceil(q * n)),
        "bound_rank": quantile_ucb_rank(n, q, conf),
        "lower_rank": quantile_lower_rank(n, q, conf),
    }
    if c.get("basis") != ranks:
        diff(f"{where}.basis", f"{c.get('basis')!r} but {n} samples at q {q:g} and confidence "
             f"{conf:g} give {ranks!r}")  # fmt: skip
        return None
    value, bound, lower = c.get("value"), c.get("bound"), c.get("lower")
    ok = True
    for key, got, rank in (("bound", bound, ranks["bound_rank"]),
                           ("lower", lower, ranks["lower_rank"])):  # fmt: skip
        if (got is None) != (rank is None):
            shown = "no such order statistic" if rank is None else f"order statistic {rank}"
            diff(f"{where}.{key}", f"{got!r} but {n} samples give {shown}")
            ok = False
    if value is None:
        diff(f"{where}.value", f"missing: {n} samples give order statistic {ranks['value_rank']}")
        return None
    if not ok:
        return None
    # the k-th smallest value is nondecreasing in k (a histogram gives an interval for each:
    # ``value`` and ``bound`` are upper ends, ``lower`` a lower end)
    pairs = [("value", value, ranks["value_rank"], "bound", bound, ranks["bound_rank"])]
    pairs.append(("lower", lower, ranks["lower_rank"], "value", value, ranks["value_rank"]))
    pairs.append(("lower", lower, ranks["lower_rank"], "bound", bound, ranks["bound_rank"]))
    for a, x, i, b, y, j in pairs:
        if x is None or y is None:
            continue
        if i <= j and x > y:
            diff(f"{where}.{b}", f"{y!r} is below {a} {x!r}, the order statistic of a rank "
                 f"≤ its own ({i} ≤ {j})")  # fmt: skip
            ok = False
        elif a != "lower" and i > j and x < y:
            diff(f"{where}.{b}", f"{y!r} is above {a} {x!r}, the order statistic of a rank "
                 f"above its own ({i} > {j})")  # fmt: skip
            ok = False
    if not ok:
        return None
    return (math.inf if bound is None else bound), (-math.inf if lower is None else lower)


def _rate(c: dict, n: int, conf: float, where: str, diff) -> tuple[float, float] | None:
    basis = c.get("basis")
    k = basis.get("count") if isinstance(basis, dict) and set(basis) == {"count"} else None
    if not _int(k) or not 0 <= k <= n:
        diff(f"{where}.basis", f"{basis!r} but a rate needs {{'count': k}}, 0 ≤ k ≤ {n}")
        return None
    if c.get("value") != k / n:
        diff(f"{where}.value", f"{c.get('value')!r} but {k} of {n} tokens give {k / n!r}")
    return rate_bounds(k, n, conf)


def _mean(c: dict, column: str, n: int, conf: float, where: str, diff):
    basis, value = c.get("basis"), c.get("value")
    if column in BINARY and isinstance(basis, dict) and "count" in basis:
        return _rate(c, n, conf, where, diff)
    if column not in RANGE or basis == {"sketch": "histogram"}:
        if column not in RANGE and basis is not None:
            diff(f"{where}.basis", f"{basis!r} but the mean of {column} has no bound")
            return None
        return math.inf, -math.inf
    variance = basis.get("variance") if isinstance(basis, dict) and len(basis) == 1 else None
    if not _float(variance) or variance < 0 or not _float(value):
        diff(f"{where}.basis", f"{basis!r} (value {value!r}) but a bounded mean needs a finite "
             "value and {'variance': v ≥ 0}")  # fmt: skip
        return None
    return mean_bounds(n, value, variance, column, conf)


def recompute(c: dict, clause, column: str, where: str, diff) -> tuple[float, float] | None:
    """The (upper, lower) confidence bounds of statistical clause verdict ``c`` recomputed from
    its raw values (+inf / −inf where there is none), once ``c``'s ``bound`` and ``lower`` are
    checked against them; None when they cannot be recomputed (each problem is reported
    through ``diff``). ``c`` holds ``samples`` ≥ 1 and finite numbers or null in ``value``,
    ``bound`` and ``lower`` (the caller checks them)."""
    n, conf = c["samples"], float(clause.confidence)
    basis = c.get("basis")
    if basis is not None and not isinstance(basis, dict):
        diff(f"{where}.basis", f"not an object: {basis!r}")
        return None
    if clause.statistic == "quantile":
        return _quantile(c, clause, n, where, diff)
    if clause.statistic == "exceed_rate":
        want = _rate(c, n, conf, where, diff)
        how = "Clopper–Pearson"
    else:
        want = _mean(c, column, n, conf, where, diff)
        counted = isinstance(basis, dict) and "count" in basis
        how = "Clopper–Pearson" if counted else "the bounded-mean bound"
    if want is None:
        return None
    ok = True
    for key, got, bound in (("bound", c.get("bound"), want[0]), ("lower", c.get("lower"), want[1])):
        shown = bound if math.isfinite(bound) else None
        if got != shown:
            diff(f"{where}.{key}", f"{got!r} but {how} at confidence {conf:g} gives {shown!r}")
            ok = False
    return want if ok else None
