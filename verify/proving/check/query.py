"""Re-checking one obligation of a report: its bound, its queries and its verdict.

Part of ``python -m verify check`` (see ``verify.proving.check.recheck``). Every helper reports
differences through ``diff(where, message)`` and never trusts a field it has not recomputed.
"""

from __future__ import annotations

import math
from fractions import Fraction

from kernel_contracts.contracts import exact
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.check.recompute import (
    SreprError,
    evaluate_iv,
    parse_srepr,
    to_sympy,
)
from kernel_contracts.verify.proving.obligations import decimal, float_or_none
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.encoding import EncodeError, encode

__all__ = ["check_obligation"]

_REL = Fraction(1, 2**100)
_QUERY_KEYS = {"text", "expected", "answer", "box", "degree", "bits", "core", "time_ms"}
_ANSWERS = (
    "sat",
    "unsat",
    "unknown",
)  # the most a stored bound interval may be wider than its value


def _q(text, where: str, diff) -> Fraction | None:
    try:
        if not isinstance(text, str) or "." in text or text.strip() != text:
            raise ValueError
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        diff(where, f"not a rational p/q: {text!r}")
        return None


def _box(raw, variables, where, diff):
    if not isinstance(raw, dict) or set(raw) != {v[0] for v in variables}:
        diff(f"{where}.box", "does not name exactly the obligation's variables")
        return None
    box = []
    for name, clause, flo, fhi in variables:
        pair = raw[name]
        if not isinstance(pair, list) or len(pair) != 2:
            diff(f"{where}.box.{name}", "not a [lo, hi] pair")
            return None
        lo, hi = _q(pair[0], f"{where}.box.{name}", diff), _q(pair[1], f"{where}.box.{name}", diff)
        if lo is None or hi is None:
            return None
        if not flo <= lo <= hi <= fhi:
            diff(f"{where}.box.{name}", f"[{lo}, {hi}] is not inside the premise range")
            return None
        box.append((name, clause, lo, hi))
    return tuple(box)


def _covers(boxes, variables) -> bool:
    """Whether ``boxes`` (each inside the full box) cover it with disjoint interiors."""
    dims = [i for i, (_, _, lo, hi) in enumerate(variables) if hi > lo]
    if not boxes:
        return False

    def volume(b):
        v = Fraction(1)
        for i in dims:
            v *= b[i][3] - b[i][2]
        return v

    for j, a in enumerate(boxes):
        for b in boxes[j + 1 :]:
            if all(min(a[i][3], b[i][3]) > max(a[i][2], b[i][2]) for i in dims):
                return False
    return sum(volume(b) for b in boxes) == volume(variables)


def _first_line_difference(a: str, b: str) -> int:
    for n, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False), 1):
        if x != y:
            return n
    return min(len(a.splitlines()), len(b.splitlines())) + 1


def _check_query(q, k, o, tree, variables, constants, thr, where, diff, notes, budget):
    wq = f"{where}.smtlib[{k}]"
    if not isinstance(q, dict) or not isinstance(q.get("text"), str):
        diff(wq, "not a query with text")
        return None
    if set(q) != _QUERY_KEYS:
        diff(wq, f"fields {sorted(q)}, not {sorted(_QUERY_KEYS)}")
    if q.get("expected") not in ("sat", "unsat") or q.get("answer") not in _ANSWERS:
        diff(wq, f"expected {q.get('expected')!r}, answer {q.get('answer')!r}: not solver answers")
    box = _box(q.get("box"), variables, wq, diff)
    if box is None:
        return None
    degree, bits = q.get("degree"), q.get("bits")
    if not isinstance(degree, int) or not isinstance(bits, int) or not 1 <= bits <= 4096:
        diff(wq, "degree and bits must be integers")
        return None
    try:
        title = f"obligation {o.get('id')}: {o.get('statement')}"
        text = encode(to_sympy(tree), box, constants, thr, degree=degree, bits=bits, title=title)
    except (EncodeError, SreprError) as err:
        diff(wq, f"cannot regenerate the query: {err}")
        return None
    if text.text != q["text"]:
        line = _first_line_difference(text.text, q["text"])
        diff(f"{wq}.text", f"differs from the query regenerated from the report (line {line})")
    # the most a run could give one guarantee query (verify.proving.solve.solver): z3 answers a
    # query within more units as within fewer, so a recorded answer is answered alike
    limits = {"rlimit": budget.allowance(budget.rlimit), "guard_s": budget.hang_guard_s}
    got = smt.z3_check(q["text"], **limits)
    answer, expected = q.get("answer"), q.get("expected")
    if answer != "unknown" and got.answer != answer:
        diff(wq, f"recorded answer {answer}, z3 now answers {got.answer}")
    if expected in ("sat", "unsat") and answer == expected and got.answer not in (expected,):
        diff(wq, f"expected {expected}, got {got.answer}")
    core = q.get("core")
    if not isinstance(core, list) or not all(isinstance(n, str) for n in core):
        diff(f"{wq}.core", "not a list of names")
        core = []
    if answer == "unsat":
        named = set(text.names)
        if not set(core) <= named:
            diff(f"{wq}.core", f"names no assertion of the query: {sorted(set(core) - named)}")
        elif smt.z3_core_suffices(q["text"], core, **limits).answer != "unsat":
            diff(f"{wq}.core", "the core alone is not unsat")
    elif core:
        diff(f"{wq}.core", f"a core on a query answered {answer}")
    cross = smt.cvc5_check(q["text"], rlimit=budget.cvc5_rlimit, guard_s=budget.hang_guard_s)
    if cross is not None:
        definite = {"sat", "unsat"}
        if cross.answer in definite and got.answer in definite and cross.answer != got.answer:
            diff(wq, f"cvc5 answers {cross.answer}, z3 {got.answer}")
        notes.append(f"{wq}: cvc5: {cross.answer}")
    return box, answer, expected, core


def check_obligation(o, where, diff, notes, clause_max, *, budget):
    """Re-check obligation ``o``; returns its status (or None) and the queries re-run."""
    label = o.get("status")
    if label not in ("proved", "refuted", "unknown"):
        diff(f"{where}.status", f"not an obligation verdict: {label!r}")
        return None, 0
    status = Status.parse(label)
    t = o.get("threshold") if isinstance(o.get("threshold"), dict) else {}
    thr = _q(t.get("rational"), f"{where}.threshold", diff)
    if thr is not None and t.get("float") != float(thr):
        diff(f"{where}.threshold.float", f"{t.get('float')!r} is not {float(thr)!r}")
    queries = o.get("smtlib") if isinstance(o.get("smtlib"), list) else None
    if queries is None:
        diff(f"{where}.smtlib", "missing")
        queries = []
    srepr = (o.get("symbolic") or {}).get("srepr") if isinstance(o.get("symbolic"), dict) else None
    if srepr is None or thr is None:
        if status is not Status.UNKNOWN:
            diff(where, f"{label} without a bound")
        if queries or o.get("bound") is not None:
            diff(where, "queries or a bound without a symbolic bound")
        return status, 0
    try:
        tree = parse_srepr(srepr)
    except SreprError as err:
        diff(f"{where}.symbolic.srepr", str(err))
        return status, 0
    variables, premises = [], o.get("premises") if isinstance(o.get("premises"), list) else []
    for i, v in enumerate(o.get("variables") or []):
        wv = f"{where}.variables[{i}]"
        lo, hi = _q(v.get("lo"), wv, diff), _q(v.get("hi"), wv, diff)
        if lo is None or hi is None or lo > hi:
            return status, 0
        clause = v.get("clause")
        if clause not in premises:
            diff(wv, f"clause {clause!r} is not among the premises {premises}")
        cmax = clause_max.get(clause)
        if cmax is not None and not (lo <= 0 and hi >= exact(cmax)):
            diff(wv, f"[{lo}, {hi}] does not cover the clause's range [0, {cmax}]")
        variables.append((v.get("name"), clause, lo, hi))
    constants = {}
    for name, text in (o.get("constants") or {}).items():
        value = _q(text, f"{where}.constants.{name}", diff)
        if value is None:
            return status, 0
        constants[name] = value
    _check_bound(o, tree, variables, constants, thr, status, where, diff)
    core = o.get("unsat_core") if isinstance(o.get("unsat_core"), list) else []
    used = sorted({n[len("premise_") :] for n in core if n.startswith("premise_")})
    if o.get("premises_used") != used:
        diff(f"{where}.premises_used", f"{o.get('premises_used')} but the core gives {used}")
    if not set(used) <= set(premises):
        diff(f"{where}.premises", f"{premises} lacks {sorted(set(used) - set(premises))}")
    checked = [
        _check_query(q, k, o, tree, variables, constants, thr, where, diff, notes, budget)
        for k, q in enumerate(queries)
    ]
    union = sorted({n for c in checked if c for n in c[3]} - {"goal"})
    if sorted(core) != union:
        diff(f"{where}.unsat_core", f"{core} but the queries' cores give {union}")
    _check_verdict(o, status, checked, tree, variables, constants, thr, where, diff)
    return status, len(queries)


def _check_bound(o, tree, variables, constants, thr, status, where, diff):
    worst = dict(constants) | {name: hi for name, _, _, hi in variables}
    unevaluated = o.get("bound") is None and o.get("bound_interval") is None
    try:
        lo, hi = evaluate_iv(tree, worst)
    except (SreprError, ZeroDivisionError, ValueError) as err:
        if not (unevaluated and status is Status.UNKNOWN):  # "cannot evaluate the bound"
            diff(f"{where}.bound", f"cannot be recomputed: {err}")
        return
    if unevaluated:
        diff(f"{where}.bound", f"missing, but the bound evaluates to {decimal((lo + hi) / 2)}")
        return
    _check_enclosure(o.get("bound_interval"), o.get("bound"), lo, hi, where, "bound", diff)
    if status is Status.PROVED and lo > thr:
        diff(where, f"proved, but the bound {decimal(lo)} exceeds the threshold {decimal(thr)}")


def _check_verdict(o, status, checked, tree, variables, constants, thr, where, diff):
    cex = o.get("counterexample")
    if status is Status.PROVED:
        good = [c for c in checked if c and c[1] == "unsat" and c[2] == "unsat"]
        if not checked or len(good) != len(checked):
            diff(where, "proved, but not every query is expected and answered unsat")
        elif not _covers([c[0] for c in good], variables):
            diff(where, "proved, but the queries' boxes do not cover the premise box")
        if cex is not None:
            diff(f"{where}.counterexample", "present on a proved obligation")
    elif status is Status.REFUTED:
        if not isinstance(cex, dict) or not isinstance(cex.get("point"), dict):
            diff(f"{where}.counterexample", "a refutation without a counterexample")
            return
        point = {}
        for name, _, lo, hi in variables:
            value = _q(cex["point"].get(name), f"{where}.counterexample.point.{name}", diff)
            if value is None or not lo <= value <= hi:
                diff(f"{where}.counterexample.point.{name}", "outside the premise range")
                return
            point[name] = value
        low, high = evaluate_iv(tree, dict(constants) | point)
        if not low > thr:
            diff(f"{where}.counterexample", "does not exceed the threshold when re-evaluated")
        _check_value(cex, low, high, f"{where}.counterexample", diff)
        inside = [
            c for c in checked
            if c and c[1] == c[2] == "sat"
            and all(lo <= point[n] <= hi for n, _, lo, hi in c[0])
        ]  # fmt: skip
        if not inside:
            diff(where, "refuted, but no query answered sat on a box holding the counterexample")
    else:
        if not o.get("reason") or not isinstance(o.get("reason"), str):
            diff(f"{where}.reason", "an unknown verdict without a reason")
        if cex is not None:
            diff(f"{where}.counterexample", "present on an unknown obligation")
        good = [c for c in checked if c and c[1] == "unsat" and c[2] == "unsat"]
        if checked and len(good) == len(checked) and _covers([c[0] for c in good], variables):
            diff(where, "unknown, but its queries are unsat on boxes covering the premise box")
    if status is not Status.UNKNOWN and o.get("reason") != "":
        diff(f"{where}.reason", f"{o.get('reason')!r} on a {status.label} obligation")


_CEX_KEYS = {"point", "value_interval", "value", "source"}
_CEX_SOURCES = ("z3 model", "upper corner of the piece")


def _check_value(cex, low, high, where, diff):
    """The stored value of a counterexample must be the re-evaluated one."""
    if set(cex) != _CEX_KEYS:
        diff(where, f"fields {sorted(cex)}, not {sorted(_CEX_KEYS)}")
    if cex.get("source") not in _CEX_SOURCES:
        diff(f"{where}.source", f"{cex.get('source')!r} is not one of {list(_CEX_SOURCES)}")
    _check_enclosure(cex.get("value_interval"), cex.get("value"), low, high, where, "value", diff)


def _check_enclosure(stored, value, lo, hi, where, name, diff):
    """``stored`` (a rational interval) and ``value`` (its midpoint as a float) must agree
    with the recomputed enclosure [lo, hi]."""
    if not isinstance(stored, list) or len(stored) != 2:
        diff(f"{where}.{name}_interval", "missing")
        return
    a = _q(stored[0], f"{where}.{name}_interval", diff)
    b = _q(stored[1], f"{where}.{name}_interval", diff)
    if a is None or b is None:
        return
    scale = max(abs(lo), abs(hi))
    if not (a <= b and a <= hi and lo <= b and b - a <= scale * _REL + Fraction(1, 2**200)):
        diff(f"{where}.{name}_interval", f"[{decimal(a, 17)}, {decimal(b, 17)}] disagrees "
             f"with the recomputed [{decimal(lo, 17)}, {decimal(hi, 17)}]")  # fmt: skip
    mid = float_or_none((lo + hi) / 2)
    if mid is None:  # beyond the float range: the report writes null, the interval carries it
        if value is not None:
            diff(
                f"{where}.{name}",
                f"{value!r} but the recomputed value {decimal(lo)} is beyond floats",
            )
        return
    if (
        not isinstance(value, float | int)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or abs(value - mid) > 1e-12 * abs(mid) + 1e-300
    ):
        diff(f"{where}.{name}", f"{value!r} but the recomputed value is {mid!r}")
