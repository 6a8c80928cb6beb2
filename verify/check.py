"""``python -m verify check REPORT.json``: re-check a report without trusting it.

Every SMT-LIB2 query is re-run in a fresh z3 (and cvc5, where installed) and its answer
compared; each query's text is regenerated from the report's bound, box and threshold and must
match; each unsat core must suffice on its own; each numeric bound is recomputed from the stored
``srepr`` by ``verify.recompute`` (mpmath intervals, not the producing code); verdicts are
re-derived from their parts (a proof needs unsat on pieces that cover the premise box; a
refutation needs a counterexample that re-evaluates above the threshold); the overall status,
exit code and escalation decisions are recomputed; the contract's hashes are recomputed, and
obligations and clauses are matched against the canonical contract. Each difference is named
by its place in the report, e.g. ``obligations[G1].smtlib[0]: expected unsat, got sat``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from fractions import Fraction

from contracts import exact
from contracts.load import read_regular
from verify import smt
from verify.checkparts import check_clauses, check_escalation, expected_clause_keys
from verify.checkquery import check_obligation
from verify.status import Status, worst

__all__ = ["CheckResult", "ReportUnreadable", "check_data", "check_main", "check_report"]

FORMAT = "kernel-contracts/report/1"


class ReportUnreadable(ValueError):
    """The file is not a readable report (exit code 2)."""


@dataclass(frozen=True)
class CheckResult:
    differences: tuple[str, ...]
    notes: tuple[str, ...]
    queries: int

    @property
    def ok(self) -> bool:
        return not self.differences


def _load(path: str) -> dict:
    try:
        raw = read_regular(path, 256 * 1024 * 1024 + 1)  # a FIFO or device is refused, not read
    except OSError as err:
        raise ReportUnreadable(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ReportUnreadable(f"{path}: not a JSON report: {err}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportUnreadable(f"{path}: not a kernel-contracts report (format {FORMAT!r})")
    return data


def _find_contract(stored: str, report_dir: str) -> str | None:
    candidates = [stored, os.path.join(report_dir, stored)]
    candidates.append(os.path.join(report_dir, os.path.basename(stored)))
    return next((c for c in candidates if os.path.isfile(c)), None)


def _check_contract(data: dict, report_dir: str, diff, notes, derived: dict) -> dict | None:
    info = data.get("contract")
    if not isinstance(info, dict):
        diff("contract", "missing")
        return None
    canonical, sha = info.get("canonical"), info.get("sha256")
    if not isinstance(canonical, str) or not isinstance(sha, str):
        diff("contract", "canonical and sha256 must be strings")
        return None
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    if info.get("canonical_sha256") != digest:
        diff("contract.canonical_sha256", f"is not the sha256 of contract.canonical ({digest})")
    path = info.get("path")
    found = _find_contract(path, report_dir) if isinstance(path, str) and path else None
    if found is None:
        notes.append(f"contract file {path!r} not found: its sha256 was not recomputed")
    else:
        with open(found, "rb") as f:
            actual = hashlib.sha256(f.read()).hexdigest()
        if actual != sha:
            diff("contract.sha256", f"{sha} but the file {found} hashes to {actual}")
        else:
            import contracts

            try:
                loaded = contracts.load(found)
            except contracts.ContractError as err:
                diff("contract", f"the contract file no longer loads: {err}")
            else:
                if loaded.source.canonical != canonical:
                    diff("contract.canonical", "differs from the canonical form of the file")
                else:
                    import bounds  # the bound each guarantee's premises give (see check_data)

                    derived.update({d.guarantee: d for d in bounds.derive(loaded)})
    if not derived:
        notes.append("contract file not loaded: the bounds' formulas were not re-derived")
    try:
        parsed = json.loads(canonical)
    except json.JSONDecodeError:
        diff("contract.canonical", "not JSON")
        return None
    if parsed.get("name") != info.get("name"):
        diff("contract.name", f"{info.get('name')!r} but the contract is {parsed.get('name')!r}")
    return parsed


def check_data(data: dict, *, report_dir: str = ".", timeout_ms: int = 20000) -> CheckResult:
    """Re-check report ``data`` (see the module docstring)."""
    differences: list[str] = []
    notes: list[str] = []

    def diff(where: str, message: str) -> None:
        differences.append(f"{where}: {message}")

    derived: dict = {}
    canonical = _check_contract(data, report_dir, diff, notes, derived) or {}
    guarantees = {g["id"]: g for g in canonical.get("guarantees", []) if isinstance(g, dict)}
    clause_max = {
        c["id"]: c.get("max")
        for family in ("numerical", "statistical")
        for c in canonical.get(family, [])
        if isinstance(c, dict)
    }
    obligations = data.get("obligations")
    if not isinstance(obligations, list):
        diff("obligations", "missing")
        obligations = []
    ids = [o.get("id") if isinstance(o, dict) else None for o in obligations]
    if canonical and ids != list(guarantees):
        diff("obligations", f"ids {ids} but the contract's guarantees are {list(guarantees)}")
    statuses: list[Status] = []
    queries = 0
    for i, o in enumerate(obligations):
        where = f"obligations[{ids[i] if ids[i] is not None else i}]"
        if not isinstance(o, dict):
            diff(where, "not an object")
            continue
        g = guarantees.get(o.get("id"))
        if g is not None:
            if o.get("quantity") != g.get("quantity"):
                diff(f"{where}.quantity", f"{o.get('quantity')!r} but the guarantee has "
                     f"{g.get('quantity')!r}")  # fmt: skip
            t = o.get("threshold")
            if not isinstance(t, dict) or t.get("rational") != _text(exact(g["max"])):
                diff(f"{where}.threshold", f"is not the guarantee's max {g['max']}")
            _check_constants(o.get("constants"), _expected_constants(canonical, g), where, diff)
        d = derived.get(o.get("id"))
        if d is not None:
            # a bound whose formula is not the one the premises give is another statement,
            # e.g. tanh(δ/4T) for tanh(δ/2T), and its queries re-check consistently
            import sympy

            want = sympy.srepr(d.expr) if d.expr is not None else None
            got = (o.get("symbolic") or {}).get("srepr") if isinstance(o, dict) else None
            if got != want:
                text = sympy.sstr(d.expr) if d.expr is not None else "—"
                diff(f"{where}.symbolic.srepr", "is not the bound the contract's premises give "
                     f"({d.route or 'none'}: {text})")  # fmt: skip
        try:
            status, n = check_obligation(o, where, diff, notes, clause_max, timeout_ms=timeout_ms)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
            diff(where, f"malformed ({type(err).__name__}: {err})")
            status, n = None, 0
        queries += n
        if status is not None:
            statuses.append(status)
    try:
        expected = expected_clause_keys(canonical)
        clause_statuses = check_clauses(
            data.get("clauses"), expected, diff, data.get("evidence") is not None
        )
        verdicts = [(o.get("id"), Status.parse(o["status"])) for o in obligations
                    if isinstance(o, dict) and o.get("status") in _LABELS]  # fmt: skip
        check_escalation(data.get("escalation"), canonical.get("escalation", []),
                         verdicts + clause_statuses, diff)  # fmt: skip
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
        diff("clauses", f"malformed ({type(err).__name__}: {err})")
        clause_statuses = []
    statuses += [s for _, s in clause_statuses]
    overall = worst(statuses)
    if data.get("status") != overall.label:
        diff("status", f"{data.get('status')!r} but its parts give {overall.label!r}")
    if data.get("exit_code") != overall.exit_code:
        diff("exit_code", f"{data.get('exit_code')!r} but status {overall.label} exits "
             f"{overall.exit_code}")  # fmt: skip
    solvers = data.get("solvers") or {}
    if isinstance(solvers, dict) and solvers.get("z3") != smt.z3_version():
        notes.append(f"report made with z3 {solvers.get('z3')}, re-checked with {smt.z3_version()}")
    return CheckResult(tuple(differences), tuple(notes), queries)


_LABELS = {s.label for s in Status}


def _expected_constants(canonical: dict, g: dict) -> dict[str, Fraction]:
    """The value every constant a bound may use takes in the contract, for guarantee ``g``."""
    policy = canonical.get("policy") or {}
    out: dict[str, Fraction] = {}

    def put(name: str, value) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = exact(value)

    put("T", policy.get("temperature"))
    put("L", g.get("horizon") or policy.get("max_new_tokens"))
    put("c", g.get("cap"))
    put("G", g.get("score_norm"))
    put("A", g.get("advantage"))
    put("clip_epsilon", g.get("clip_epsilon"))
    span = g.get("reward_range")
    if isinstance(span, list) and len(span) == 2 and all(isinstance(x, int | float) for x in span):
        out["reward_span"] = exact(span[1]) - exact(span[0])
    for c in canonical.get("statistical", []):
        if isinstance(c, dict) and isinstance(c.get("id"), str):
            put(f"thr_{c['id']}", c.get("threshold"))
            if isinstance(c.get("q"), int | float):
                out[f"rho_{c['id']}"] = 1 - exact(c["q"])
    return out


def _check_constants(stored, expected: dict[str, Fraction], where: str, diff) -> None:
    """Each stored constant must be the contract's value: a bound on a forged temperature,
    horizon or cap is a different (possibly weaker) statement that re-checks consistently."""
    if not isinstance(stored, dict):
        return  # reported by the obligation's own check
    for name, text in stored.items():
        if name not in expected:
            diff(f"{where}.constants.{name}", "is no constant the contract defines")
            continue
        try:
            value = Fraction(text) if isinstance(text, str) and "." not in text else None
        except (ValueError, ZeroDivisionError):
            value = None
        if value != expected[name]:
            diff(f"{where}.constants.{name}", f"{text!r} but the contract gives "
                 f"{_text(expected[name])}")  # fmt: skip


def _text(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def check_report(path: str, *, timeout_ms: int = 20000) -> CheckResult:
    """Re-check the report file at ``path``; raises ``ReportUnreadable`` (exit 2)."""
    data = _load(path)
    return check_data(data, report_dir=os.path.dirname(os.path.abspath(path)),
                      timeout_ms=timeout_ms)  # fmt: skip


def check_main(path: str, *, stdout, stderr) -> int:
    """The ``check`` command: 0 all agree, 1 any difference, 2 not a readable report."""
    try:
        result = check_report(path)
    except ReportUnreadable as err:
        stderr.write(f"{err}\n")
        return 2
    for note in result.notes:
        stdout.write(f"note: {note}\n")
    for d in result.differences:
        stdout.write(f"DIFFERENCE {d}\n")
    if result.ok:
        stdout.write(f"{path}: re-checked, all agree ({result.queries} queries re-run)\n")
        return 0
    stdout.write(f"{path}: {len(result.differences)} difference(s)\n")
    return 1
