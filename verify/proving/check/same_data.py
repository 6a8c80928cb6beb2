"""Re-checking that the verdicts a report draws from one source's tokens agree with each other
(part of ``verify check``).

Each measured verdict records numbers about one column of one source's tokens on one slice: the
token count ``samples``, a count ``basis.count`` of values above the clause's threshold, order
statistics at ranks (``basis``), the maximum, the mean. The evidence is not re-read, but these
are facts about the same values, so each must agree with the others (``evidence.summary``
gives them all from one summary):

- one token count per source and slice: every column is summarised over the same tokens (a
  non-finite value counts as the worst, it is not dropped); on slice ``all`` that count is
  the source's ``tokens``, and no slice holds more;
- k of n values above t: an order statistic of rank r > n − k lies above t, so an upper end
  (``value``, ``bound``) at such a rank above t; one of rank r ≤ n − k lies at most at t, so a
  lower end (``lower``) at such a rank at most t (a histogram summary gives an upper and a
  lower end of each order statistic, an exact one the value itself: both rules hold for both);
  the maximum lies above t exactly when k ≥ 1; the counts do not grow with the threshold;
- the maximum is at least every order statistic and the mean; order statistics do not
  decrease with the rank, across clauses too (a lower end at rank i is at most an upper end at
  rank j ≥ i), and two clauses give one order statistic of one rank the same ends;
- a slice selects from slice ``all``'s tokens: its count, its counts above and at most t, and
  its maximum are at most slice ``all``'s;
- a log's ``framework_metrics`` maximum |log w| (``sampling/sampling_logp_difference/max``) is
  the maximum of ``abs_log_ratio`` on slice ``all`` when no kept mass corrected the log.

Every difference names both fields it contradicts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from kernel_contracts.evidence.table import clause_column
from kernel_contracts.verify.proving.check.sources import source_index
from kernel_contracts.verify.proving.check.values import is_real

__all__ = ["check_same_data"]

_FRAMEWORK_MAX = "sampling/sampling_logp_difference/max"


@dataclass(frozen=True)
class _Fact:
    """One number a verdict states about its data: ``what`` is ``count`` (k values above
    ``at``), ``upper``/``lower`` (an end of the order statistic of rank ``at``), ``max`` or
    ``mean``."""

    where: str  # the field, e.g. clauses[S1/all].bound
    clause: str  # the verdict, e.g. clauses[S1/all]
    what: str
    at: float | int | None
    value: float | int


def _rank(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _facts(c: dict, clause, family: str, where: str) -> list[_Fact]:
    """The facts verdict ``c`` (of ``clause``) states about its column."""
    statistic = "max" if family == "numerical" else clause.statistic
    value, basis = c.get("value"), c.get("basis")
    basis = basis if isinstance(basis, dict) else {}
    out: list[_Fact] = []
    if statistic == "max":
        if is_real(value):
            out.append(_Fact(f"{where}.value", where, "max", None, value))
    elif statistic == "exceed_rate":
        k = basis.get("count")
        if isinstance(k, int) and not isinstance(k, bool) and k >= 0:
            out.append(_Fact(f"{where}.basis.count", where, "count", float(clause.threshold), k))
    elif statistic == "quantile":
        ends = (("value", "value_rank", "upper"), ("bound", "bound_rank", "upper"),
                ("lower", "lower_rank", "lower"))  # fmt: skip
        for key, rank, end in ends:
            if is_real(c.get(key)) and _rank(basis.get(rank)):
                out.append(_Fact(f"{where}.{key}", where, end, basis[rank], c[key]))
    elif statistic == "mean" and is_real(value):
        out.append(_Fact(f"{where}.value", where, "mean", None, value))
    return out


def _at(f: _Fact) -> str:
    if f.what == "count":
        return f"{f.where} {f.value} (above {f.at:g})"
    if f.what in ("upper", "lower"):
        return f"{f.where} {f.value!r} (order statistic {f.at})"
    return f"{f.where} {f.value!r} (the {f.what})"


def _pairs(facts: list[_Fact], n: int, diff) -> None:
    """Facts about one column of one source's tokens on one slice, ``n`` of them."""
    by = defaultdict(list)
    for f in facts:
        by[f.what].append(f)
    for m in by["max"]:
        for f in by["upper"] + by["lower"] + by["mean"]:
            if f.value > m.value:
                diff(m.where, f"{m.value!r} is the maximum, but {_at(f)} lies above it")
        for k in by["count"]:
            if (k.value >= 1) != (m.value > k.at):
                diff(m.where, f"{m.value!r} is the maximum, but {k.where} counts {k.value} "
                     f"of the same {n} tokens above {k.at:g}")  # fmt: skip
    for k in by["count"]:
        below = n - k.value  # ranks 1 … n − k lie at most at the threshold
        for f in by["upper"]:
            if f.at > below and f.value <= k.at:
                diff(f.where, f"{f.value!r} (order statistic {f.at} of {n}) is at most "
                     f"{k.at:g}, but {k.where} counts {k.value} of the same {n} tokens "
                     f"above {k.at:g}, so every order statistic above rank {below} lies "
                     "above it")  # fmt: skip
        for f in by["lower"]:
            if f.at <= below and f.value > k.at:
                diff(f.where, f"{f.value!r} (order statistic {f.at} of {n}) is above "
                     f"{k.at:g}, but {k.where} counts only {k.value} of the same {n} tokens "
                     f"above {k.at:g}, so every order statistic up to rank {below} lies at "
                     "most at it")  # fmt: skip
        for j in by["count"]:
            if j.at > k.at and j.value > k.value:
                diff(j.where, f"{j.value} tokens above {j.at:g}, but {k.where} counts only "
                     f"{k.value} of the same {n} tokens above the lower {k.at:g}")  # fmt: skip
            elif j.at == k.at and j.value != k.value and j.where < k.where:
                diff(j.where, f"{j.value} tokens above {j.at:g}, but {k.where} counts "
                     f"{k.value} of the same {n} tokens above it")  # fmt: skip
    ordered = by["upper"] + by["lower"]
    for a in ordered:
        for b in ordered:
            same = a.what == b.what and a.at < b.at
            mixed = a.what == "lower" and b.what == "upper" and a.at <= b.at
            if a.clause == b.clause:
                continue  # within one verdict the order is checked with its ranks (confidence)
            if (same or mixed) and a.value > b.value:
                diff(b.where, f"{b.value!r} (order statistic {b.at}) is below {_at(a)}, of "
                     "a rank at most its own on the same tokens")  # fmt: skip
            elif a.what == b.what and a.at == b.at and a.value != b.value and a.where < b.where:
                diff(b.where, f"{b.value!r} (order statistic {b.at}) but {_at(a)}, of the "
                     "same rank on the same tokens")  # fmt: skip


def _subset(part: list[_Fact], n_part: int, whole: list[_Fact], n_all: int, diff) -> None:
    """Facts of a slice (``part``) against those of slice ``all`` (``whole``), one column."""
    for p in part:
        for w in whole:
            if p.what == w.what == "max" and p.value > w.value:
                diff(p.where, f"{p.value!r} is above {_at(w)}, the maximum of a superset of "
                     "its tokens")  # fmt: skip
            counts = p.what == w.what == "count" and p.at == w.at
            if counts and (p.value > w.value or n_part - p.value > n_all - w.value):
                diff(p.where, f"{p.value} of {n_part} tokens above {p.at:g}, but {w.where} "
                     f"counts {w.value} of {n_all} on slice all, a superset")  # fmt: skip


def _counts(groups: dict, sources: dict, diff) -> dict:
    """One token count per (source, slice), slice ``all``'s the source's ``tokens``
    (``sources``: each source's place in the report and its ``tokens``); returns the count of
    each (source, slice)."""
    out = {}
    for (src, slice_name), counted in groups.items():
        place, whole = sources[src]
        if not isinstance(whole, int) or isinstance(whole, bool):
            whole = None
        if slice_name == "all" and whole is not None:
            want, said = whole, f"{place}.tokens is {whole}"
        else:
            common = Counter(n for _, n in counted).most_common(1)[0][0]
            first = next(w for w, n in counted if n == common)
            want, said = common, f"{first}.samples counts {common}"
        for where, n in counted:
            if n != want:
                diff(f"{where}.samples", f"{n} but {said} tokens of the same source and slice "
                     f"{slice_name!r}")  # fmt: skip
        out[(src, slice_name)] = want
        if slice_name != "all" and whole is not None and want > whole:
            diff(f"{counted[0][0]}.samples", f"{want} tokens in slice {slice_name!r}, but "
                 f"{place}.tokens is {whole}")  # fmt: skip
    return out


def check_same_data(clauses, contract, evidence, diff) -> None:
    """Cross-check the measured verdicts that rest on the same source (see the module
    docstring). Verdicts whose fields are malformed are left to ``check_clauses``."""
    if not isinstance(clauses, list) or not isinstance(evidence, dict):
        return
    index = source_index(evidence)
    sources = evidence.get("sources")
    places = {key: (f"evidence.sources[{i}]", sources[i].get("tokens")) for key, i in index.items()}
    counted = defaultdict(list)  # (source, slice) → [(where, samples)]
    facts = defaultdict(list)  # (source, slice, column) → [_Fact]
    for c in clauses:
        if not isinstance(c, dict) or c.get("family") not in ("numerical", "statistical"):
            continue
        src, slice_name = (c.get("source"), c.get("fingerprint")), c.get("slice")
        samples = c.get("samples")
        if c.get("status") == "skipped" or src not in index or not isinstance(slice_name, str):
            continue
        if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
            continue
        try:
            clause = contract.clause(c.get("id"))
        except KeyError:
            continue
        where = f"clauses[{c.get('id')}/{slice_name}]"
        counted[(src, slice_name)].append((where, samples))
        column = clause_column(c["family"], clause.metric)
        facts[(src, slice_name, column)] += _facts(c, clause, c["family"], where)
    n_of = _counts(counted, places, diff)
    for (src, slice_name, column), found in facts.items():
        n = n_of[(src, slice_name)]
        _pairs(found, n, diff)
        whole = facts.get((src, "all", column))
        if slice_name != "all" and whole is not None:
            _subset(found, n, whole, n_of[(src, "all")], diff)
    _framework_max(sources, facts, index, diff)


def _framework_max(sources, facts, index, diff) -> None:
    for key, i in index.items():
        s = sources[i]
        if s.get("kind") != "logprobs":
            continue
        shift = s.get("truncated_support_shift")
        metrics = s.get("framework_metrics")
        if not isinstance(shift, dict) or shift.get("corrected_with_log_kept_mass") is not False:
            continue
        logged = metrics.get(_FRAMEWORK_MAX) if isinstance(metrics, dict) else None
        if not is_real(logged):
            continue
        for f in facts.get((key, "all", "abs_log_ratio"), []):
            if f.what == "max" and f.value != logged:
                diff(f.where, f"{f.value!r} is the maximum |log w|, but evidence.sources[{i}]"
                     f".framework_metrics[{_FRAMEWORK_MAX!r}] gives {logged!r} on the same "
                     "tokens")  # fmt: skip
