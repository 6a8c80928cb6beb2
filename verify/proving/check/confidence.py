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

A sampled-token log's columns of per-token *lower bounds* (``evidence.table.LOWER_BOUNDED``)
have no upper bound (``bound`` null) and only ``lower`` (``recompute_lower``): the
Clopper–Pearson lower bound from ``basis.count``; the lower rank of a quantile, its order
statistic raw and at most ``value``; for a mean, the bounded-mean lower bound of E[min(x, M)]
from ``basis.cut_mean`` and ``basis.cut_variance`` (raw), M fixed by the clause
(``verify.decide.verdicts.lower_top``); a maximum is its own ``bound``.
"""

from __future__ import annotations

import math

from kernel_contracts.evidence.table import RANGE
from kernel_contracts.verify.decide.verdicts import (
    BINARY,
    lower_mean_bound,
    lower_top,
    mean_bounds,
    quantile_lower_rank,
    rate_bounds,
)

__all__ = ["recompute", "recompute_lower"]


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _float(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _quantile(c: dict, clause, n: int, where: str, diff) -> tuple[float, float] | None:
    """Order statistics: the ranks are recomputed, the values are raw but must be ordered."""
    from kernel_contracts.bounds.stats import quantile_ucb_rank

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


def _lower_quantile(c: dict, clause, n: int, where: str, diff) -> float | None:
    q, conf = float(clause.q), float(clause.confidence)
    ranks = {"value_rank": max(1, math.ceil(q * n)), "lower_rank": quantile_lower_rank(n, q, conf)}
    if c.get("basis") != ranks:
        diff(f"{where}.basis", f"{c.get('basis')!r} but {n} samples at q {q:g} and confidence "
             f"{conf:g} give {ranks!r}")  # fmt: skip
        return None
    lower, value = c.get("lower"), c.get("value")
    if (lower is None) != (ranks["lower_rank"] is None) or value is None:
        diff(f"{where}.lower", f"{lower!r} (value {value!r}) but {n} samples give "
             f"{'no' if ranks['lower_rank'] is None else 'an'} order statistic of rank "
             f"{ranks['lower_rank']}")  # fmt: skip
        return None
    if lower is not None and lower > value:  # lower_rank ≤ value_rank
        diff(f"{where}.lower", f"{lower!r} is above value {value!r}, an order statistic of a "
             "higher rank")  # fmt: skip
        return None
    return -math.inf if lower is None else lower


def _lower_mean(c: dict, clause, column: str, n: int, where: str, diff) -> float | None:
    basis = c.get("basis")
    if basis == {"sketch": "histogram"}:
        return -math.inf
    keys = {"cut_mean", "cut_variance"}
    top = lower_top(clause, column)
    if not isinstance(basis, dict) or set(basis) != keys or not all(map(_float, basis.values())):
        diff(f"{where}.basis", f"{basis!r} but a mean of lower bounds needs {sorted(keys)}")
        return None
    mean, variance = basis["cut_mean"], basis["cut_variance"]
    if not (0.0 <= mean <= top and variance >= 0):
        diff(f"{where}.basis", f"{basis!r}: min(x, {top:g}) has a mean in [0, {top:g}] and a "
             "variance ≥ 0")  # fmt: skip
        return None
    return lower_mean_bound(n, mean, variance, top, float(clause.confidence))


def recompute_lower(c: dict, clause, column: str, where: str, diff) -> float | None:
    """The lower confidence bound of a statistical verdict ``c`` decided on per-token lower
    bounds (−inf where there is none), recomputed from its raw values once ``c``'s ``bound``
    (null) and ``lower`` are checked against it; None after reporting a difference."""
    n, conf = c["samples"], float(clause.confidence)
    basis = c.get("basis")
    if basis is not None and not isinstance(basis, dict):
        diff(f"{where}.basis", f"not an object: {basis!r}")
        return None
    if c.get("bound") is not None:
        diff(f"{where}.bound", f"{c.get('bound')!r} but lower bounds of {column} give no upper "
             "bound")  # fmt: skip
        return None
    if clause.statistic == "quantile":
        return _lower_quantile(c, clause, n, where, diff)
    if clause.statistic == "exceed_rate":
        found = _rate(c, n, conf, where, diff)
        want = None if found is None else found[1]
        how = "Clopper–Pearson"
    else:
        want = _lower_mean(c, clause, column, n, where, diff)
        how = "the bounded-mean lower bound"
    if want is None:
        return None
    shown = want if math.isfinite(want) else None
    if c.get("lower") != shown:
        diff(f"{where}.lower", f"{c.get('lower')!r} but {how} at confidence {conf:g} gives "
             f"{shown!r}")  # fmt: skip
        return None
    return want
