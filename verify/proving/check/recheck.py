"""``python -m verify check REPORT.json``: re-check a report without trusting it.

The contract is rebuilt from the report's own canonical form (``contracts.from_canonical``:
validated like a contract file, and required to be exactly canonical), so a report re-checks
the same with or without its contract file, from any directory. Everything a verdict rests on
is re-derived from that contract or recomputed; nothing else is read. Every SMT-LIB2 query is
re-run in a fresh z3 (and cvc5, where installed). A report file with a duplicate key or a
non-finite number anywhere is refused (exit 2). Each difference is named by its place in the
report, e.g. ``obligations[G1].smtlib[0]: recorded answer unsat, z3 now answers sat``.

Every field of a report, and how ``check`` treats it (re-derived: regenerated from the
contract and required equal; recomputed: computed again from the report's other fields;
free: descriptive, never used for a verdict):

=====================================  =========================================================
field                                  treatment
=====================================  =========================================================
format                                 must be ``kernel-contracts/report/1`` (else exit 2)
status, exit_code                      recomputed: the worst verdict of all parts
contract.canonical                     rebuilt into a Contract, validated, must be canonical
contract.canonical_sha256              recomputed from ``contract.canonical``
contract.name                          re-derived from the contract
contract.sha256                        recomputed from the contract file when one is found
                                       (a file found that differs is a difference); else noted
contract.path                          free (where the contract was; used only to find it)
toolkit, python, solvers, timing       free (versions and times; a z3 version change is noted)
obligations[] order and ids            re-derived: one per guarantee, in contract order
<side>:int32, <side>:fp32 obligations  int8 kernels' exactness
                                       (``verify.proving.kernel_obligations``): every field
                                       re-derived from the contract, the query re-run, the
                                       witness re-evaluated (times free)
obligation id, quantity, statement,    re-derived (``bounds.derive``, ``verify.proving.obligations
premises, chain, symbolic.srepr,       .outline``) and required equal; a difference in the bound,
symbolic.text, symbolic.latex,         its variables, constants or threshold stops that
variables, constants, threshold,       obligation's re-check there, so forged values are never
alternatives, route, notes             evaluated
obligation status                      recomputed: proved ⇔ every query unsat on boxes covering
                                       the premise box; refuted ⇒ a confirmed counterexample,
                                       on a route whose bound is attained; unknown ⇒ neither
obligation bound, bound_interval       recomputed (``verify.proving.check.recompute``: mpmath
                                       intervals)
smtlib[].text                          regenerated from the bound, box, degree and bits
smtlib[].answer, expected, core        recomputed: re-run in z3; each core re-run on its own
smtlib[].box, degree, bits             checked: inside the premise box; regenerate the text
unsat_core, premises_used              recomputed from the queries' cores
counterexample.point, source           re-confirmed: inside the box, bound above max there
counterexample.value(_interval)        recomputed at the point
reason                                 empty on proved and refuted; for unknown, free text
                                       (required; the no-bound reason is re-derived)
time_ms (obligation and query)         free
clauses[] order, id, family, slice     re-derived from the contract
runtime and observability clauses      re-derived (``verify.common.static_clauses``) from the
                                       contract and the runtime envelopes of the sources,
                                       checked against their extent (``check.envelope``)
clauses without evidence               re-derived (skipped, with the run's reason), all fields
measured clause metric, statistic,     re-derived from the clause
threshold, confidence
measured clause source, fingerprint    must name one of ``evidence.sources``
measured clause samples, value         raw measured data (the evidence is not re-read): finite
                                       numbers; a rate's value must be basis.count / samples;
                                       one token count per source and slice, slice all's the
                                       source's tokens (``verify.proving.check.same_data``)
measured clause bound, lower, basis    recomputed (``verify.proving.check.confidence``, with the
                                       functions the run used) and required equal: the
                                       Clopper–Pearson bounds from basis.count, the bounded-mean
                                       bounds from value and basis.variance, a quantile's ranks
                                       from samples, q and confidence (its order statistics are
                                       raw, but must be in rank order); a maximum's bound is its
                                       value; none where no bound was computed
skipped measured clause                re-derived: a skip is accepted only where the source's
                                       kind cannot give the metric, or the slice selects on a
                                       column that kind of source does not record
                                       (``evidence.table.unmeasurable``, ``slice_columns``)
numbers of verdicts on one source's     cross-checked (``verify.proving.check.same_data``):
tokens (one column, one slice)         order statistics against exceedance counts, the maximum
                                       and each other; counts across thresholds and against
                                       slice all; a log's maximum |log w| against its
                                       framework_metrics
measured clause status                 recomputed from samples, the recomputed bound and
                                       lower bound, max and min_samples by
                                       ``verify.decide.verdicts``: exactly one verdict
measured clause reason                 free text (required unless held)
evidence.sources[] kinds and fields    re-derived (``verify.proving.check.sources``): an
                                       emulation source exactly when the contract declares
                                       one, a log source when it declares logs (or undeclared,
                                       from --evidence), each with the fields of its kind; an
                                       emulation's settings and label from the contract
log source fingerprint, label, totals  recomputed from its files[] (sha256, path, counts)
truncated_support_shift                declared re-derived from the policy; corrected from
                                       that and kept_mass_logged_tokens; detected by the
                                       detection rule (``evidence.logs.shift``) on the recorded
                                       sign_test_z, positive_share and median_shift;
                                       estimated_log_kept_mass from those; tokens the source's;
                                       positive_share a count over tokens. The statistics
                                       themselves are raw; together they decide whether
                                       log-ratio verdicts may stay inconclusive
evidence.assumptions, evidence.sweep   re-derived (the run's assumptions; the swept sources)
other evidence fields                  free (files[] details, framework metrics other than the
                                       maximum |log w|, weight diagnostics, notes, an
                                       emulation's hashes); a runtime envelope's extent and
                                       its counts within what the extent allows are raw
escalation[]                           recomputed (``verify.common.escalation.decide``), all
                                       fields
support[]                              recomputed (``verify.common.support``) from the clause
                                       verdicts, listed exactly when evidence was given
=====================================  =========================================================
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass

from kernel_contracts.contracts import ContractError, KernelContractsError, load, read_regular
from kernel_contracts.contracts.canonical import from_canonical
from kernel_contracts.verify.common.status import Status, worst
from kernel_contracts.verify.proving.check.parts import (
    OBLIGATION_KEYS,
    check_clauses,
    check_escalation,
    check_keys,
    check_outline,
    check_support,
)
from kernel_contracts.verify.proving.check.query import check_obligation
from kernel_contracts.verify.proving.check.same_data import check_same_data
from kernel_contracts.verify.proving.check.sources import check_sources
from kernel_contracts.verify.proving.kernel_obligations import (
    check_kernel_obligation,
    kernel_outlines,
)
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.budget import Budget, BudgetError

__all__ = [
    "CheckResult",
    "ReportUnreadable",
    "check_data",
    "check_main",
    "check_report",
    "load_report",
    "strict_json",
]

FORMAT = "kernel-contracts/report/1"
_TOP = frozenset(
    ("format", "status", "exit_code", "contract", "toolkit", "python", "solvers",
     "solver_budget", "obligations", "clauses", "evidence", "escalation", "support", "timing")
)  # fmt: skip
_CONTRACT = frozenset(("path", "sha256", "canonical", "canonical_sha256", "name"))
_LABELS = ("proved", "refuted", "unknown")


class ReportUnreadable(KernelContractsError, ValueError):
    """The file is not a readable report (exit code 2)."""


@dataclass(frozen=True)
class CheckResult:
    differences: tuple[str, ...]
    notes: tuple[str, ...]
    queries: int

    @property
    def ok(self) -> bool:
        return not self.differences


class _Pairs(list):
    """A JSON object as read, every key kept (so duplicates can be named with their path)."""


class _Constant(str):
    """``NaN``, ``Infinity`` or ``-Infinity`` where the JSON has one (JSON has no such number)."""


def _strict(value, where: str):
    """``value`` with objects made dicts; ``ValueError`` naming the key path of a duplicate
    key or a non-finite number."""
    if isinstance(value, _Pairs):
        out = {}
        for key, item in value:
            path = f"{where}.{key}" if where else key
            if key in out:
                raise ValueError(f"duplicate key {path}")
            out[key] = _strict(item, path)
        return out
    if isinstance(value, list):
        return [_strict(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, _Constant):
        raise ValueError(f"{where}: {value} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: a number out of range")
    return value


def strict_json(raw: bytes):
    """``raw`` read as JSON with every object made a dict; ``ValueError`` naming the key path
    of a duplicate key or a non-finite number (``json.JSONDecodeError`` when it is no JSON)."""
    data = json.loads(raw.decode("utf-8"), object_pairs_hook=_Pairs, parse_constant=_Constant)
    return _strict(data, "")


def load_report(path: str) -> dict:
    """The report at ``path`` read strictly; ``ReportUnreadable`` naming what is wrong."""
    try:
        raw = read_regular(path, 256 * 1024 * 1024 + 1)  # a FIFO or device is refused, not read
    except OSError as err:
        raise ReportUnreadable(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_Pairs, parse_constant=_Constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ReportUnreadable(f"{path}: not a JSON report: {err}") from None
    try:
        data = _strict(data, "")
    except ValueError as err:
        raise ReportUnreadable(f"{path}: not a usable report: {err}") from None
    except RecursionError:
        raise ReportUnreadable(f"{path}: not a usable report: nested too deeply") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportUnreadable(f"{path}: not a kernel-contracts report (format {FORMAT!r})")
    return data


def _nonfinite(value, where: str, diff) -> None:
    """Report data read elsewhere than ``load_report`` (``check_data``) with a non-finite number."""
    if isinstance(value, dict):
        for key, item in value.items():
            _nonfinite(item, f"{where}.{key}" if where else str(key), diff)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _nonfinite(item, f"{where}[{i}]", diff)
    elif isinstance(value, float) and not math.isfinite(value):
        diff(where, f"{value!r} is not a finite number")


def _find_contract(stored: str, report_dir: str) -> str | None:
    candidates = [stored, os.path.join(report_dir, stored)]
    candidates.append(os.path.join(report_dir, os.path.basename(stored)))
    return next((c for c in candidates if os.path.isfile(c)), None)


def _contract(data: dict, report_dir: str, diff, notes):
    """The contract rebuilt from the report's canonical form (None if it cannot be)."""
    info = data.get("contract")
    if not check_keys(info, _CONTRACT, "contract", diff):
        return None
    canonical, sha = info.get("canonical"), info.get("sha256")
    if not isinstance(canonical, str) or not isinstance(sha, str):
        diff("contract", "canonical and sha256 must be strings")
        return None
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    if info.get("canonical_sha256") != digest:
        diff("contract.canonical_sha256", f"is not the sha256 of contract.canonical ({digest})")
    try:
        contract = from_canonical(canonical, path="contract.canonical", sha256=sha)
    except ContractError as err:
        for p in err.problems:
            diff("contract.canonical", f"{p.key}: {p.message}" if p.key else p.message)
        return None
    if info.get("name") != contract.name:
        diff("contract.name", f"{info.get('name')!r} but the contract is {contract.name!r}")
    path = info.get("path")
    found = _find_contract(path, report_dir) if isinstance(path, str) and path else None
    if found is None:
        notes.append(f"contract file {path!r} not found: everything was re-derived from "
                     "contract.canonical; the file's sha256 was not recomputed")  # fmt: skip
        return contract
    try:
        with open(found, "rb") as f:
            actual = hashlib.sha256(f.read()).hexdigest()
        loaded = load(found) if actual == sha else None
    except (OSError, ContractError) as err:
        diff("contract", f"the contract file {found} cannot be read back: {err}")
        return contract
    if loaded is None:
        diff("contract.sha256", f"{sha} but the file {found} hashes to {actual}")
    elif loaded.source.canonical != canonical:
        diff("contract.canonical", f"differs from the canonical form of the file {found}")
    return contract


def check_data(data: dict, *, report_dir: str = ".") -> CheckResult:
    """Re-check report ``data`` (see the module docstring); every query is re-run within the
    solver budget the report records (``_budget``)."""
    differences: list[str] = []
    notes: list[str] = []

    def diff(where: str, message: str) -> None:
        differences.append(f"{where}: {message}")

    def done(queries: int = 0) -> CheckResult:
        return CheckResult(tuple(differences), tuple(notes), queries)

    if not isinstance(data, dict):
        diff("report", "not an object")
        return done()
    _nonfinite(data, "", diff)
    check_keys(data, _TOP, "report", diff)
    budget = _budget(data, diff)
    contract = _contract(data, report_dir, diff, notes)
    if contract is None:
        return done()  # nothing can be re-derived
    from kernel_contracts import bounds
    from kernel_contracts.verify.proving.obligations import obligation_json, outline

    derivations = {d.guarantee: d for d in bounds.derive(contract)}
    obligations = data.get("obligations")
    if not isinstance(obligations, list):
        diff("obligations", "missing")
        obligations = []
    ids = [o.get("id") if isinstance(o, dict) else None for o in obligations]
    kernel_ids = [k.id for k in kernel_outlines(contract)]  # int8 kernels' exactness
    if ids != [g.id for g in contract.guarantees] + kernel_ids:
        diff("obligations", f"ids {ids} but the contract's guarantees are "
             f"{[g.id for g in contract.guarantees]}"
             + (f" and its int8 kernels' {kernel_ids}" if kernel_ids else ""))  # fmt: skip
    clause_max = {c.id: c.max for c in (*contract.numerical, *contract.statistical)}
    verdicts: list[tuple[str, Status]] = []
    queries = 0
    for i, o in enumerate(obligations):
        where = f"obligations[{ids[i] if isinstance(ids[i], str) else i}]"
        if ids[i] in kernel_ids and isinstance(o, dict):
            label = o.get("status")
            if label in _LABELS:
                verdicts.append((ids[i], Status.parse(label)))
            queries += check_kernel_obligation(o, contract, where, diff, notes, budget=budget)
            continue
        d = derivations.get(ids[i]) if isinstance(ids[i], str) else None
        if not check_keys(o, OBLIGATION_KEYS, where, diff) or d is None:
            continue
        label = o.get("status")
        if label not in _LABELS:
            diff(f"{where}.status", f"not an obligation verdict: {label!r}")
            continue
        verdicts.append((d.guarantee, Status.parse(label)))
        if not check_outline(o, obligation_json(outline(d)), where, diff):
            continue  # another statement: its numbers are not evaluated (they may be huge)
        if label == "refuted" and not d.extra.get("attained", True):
            diff(f"{where}.status", f"refuted, but route {d.route!r} is not attained: its "
                 "bound lies above the supremum, so a bound above max refutes nothing")  # fmt: skip
        if d.expr is None:
            want = obligation_json(outline(d))
            for key in ("status", "reason", "bound", "bound_interval", "smtlib", "unsat_core",
                        "premises_used", "counterexample"):  # fmt: skip
                if o.get(key) != want[key]:
                    diff(f"{where}.{key}", f"{o.get(key)!r} but no bound was derived")
            continue
        try:
            _, n = check_obligation(o, where, diff, notes, clause_max, budget=budget)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
            diff(where, f"malformed ({type(err).__name__}: {err})")
            n = 0
        queries += n
    evidence = data.get("evidence")
    if evidence is not None and not isinstance(evidence, dict):
        diff("evidence", "not an object")
        evidence = None
    clause_statuses = check_clauses(data.get("clauses"), contract, evidence, diff)
    check_sources(evidence, contract, diff)
    check_same_data(data.get("clauses"), contract, evidence, diff)
    check_escalation(data.get("escalation"), contract.escalation,
                     verdicts + clause_statuses, diff)  # fmt: skip
    supports = check_support(data.get("support"), contract, evidence, clause_statuses, diff)
    overall = worst([s for _, s in verdicts + clause_statuses] + supports)
    if data.get("status") != overall.label:
        diff("status", f"{data.get('status')!r} but its parts give {overall.label!r}")
    if data.get("exit_code") != overall.exit_code:
        diff("exit_code", f"{data.get('exit_code')!r} but status {overall.label} exits "
             f"{overall.exit_code}")  # fmt: skip
    solvers = data.get("solvers") or {}
    if isinstance(solvers, dict) and solvers.get("z3") != smt.z3_version():
        notes.append(f"report made with z3 {solvers.get('z3')}, re-checked with {smt.z3_version()}")
    return done(queries)


def _budget(data: dict, diff) -> Budget:
    """The solver budget the report records (``solver_budget``); the default one when it is
    missing (``check_keys`` says so) or malformed (a difference)."""
    if "solver_budget" not in data:
        return Budget()
    try:
        return Budget.from_json(data["solver_budget"])
    except BudgetError as err:
        diff("solver_budget", f"{err}; re-checked with the default budget")
        return Budget()


def check_report(path: str) -> CheckResult:
    """Re-check the report file at ``path``; raises ``ReportUnreadable`` (exit 2)."""
    data = load_report(path)
    return check_data(data, report_dir=os.path.dirname(os.path.abspath(path)))


def check_main(path: str, *, stdout, stderr) -> int:
    """The ``check`` command: 0 all agree, 1 any difference, 2 not a readable report. A
    promotion record is the pipeline's (``verify.pipeline.promotion.check_record_main``)."""
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
