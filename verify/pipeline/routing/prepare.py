"""What a training loop settles once before its first batch: the contract's proved TIS cap and
the verdicts of the guarantees its escalation policy names.

The cap of ``tis_correct`` must come from a guarantee the contract proves: a ``pg_bias``
guarantee with ``estimator: tis`` and ``cap: c`` whose obligation is ``proved``. Its status
comes from ``bounds.derive`` and ``verify.proving.obligations.discharge`` run here, or from a
report: a ``verify.Report`` of this contract (as ``verify.proving.runner.run`` returns it), or
a report file, which is re-checked in full (``verify.proving.check.recheck``) before any of its
verdicts is used, so an edited report can never lend a cap. A policy that can fire
``tis_correct`` without a proved cap is refused here, before the loop starts, with the reason.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from fractions import Fraction

from kernel_contracts.contracts import Contract, Guarantee, exact
from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.static_clauses import static_clauses
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.pipeline.routing.arrays import RoutingError

__all__ = ["Router", "prepare", "tis_guarantees"]


@dataclass(frozen=True)
class Router:
    """A contract ready to route batches: the proved TIS cap (``None`` when the policy has no
    ``tis_correct`` and none was asked for), the verdicts of the guarantees Π names, and the
    runtime and observability verdicts decided from the contract alone."""

    contract: Contract = field(repr=False)
    cap: Fraction | None
    cap_guarantee: str | None
    obligations: tuple[tuple[str, Status], ...]
    static: tuple[ClauseResult, ...] = field(repr=False)
    statuses_from: str  # "derived here" or the report they were read from


def tis_guarantees(contract: Contract) -> tuple[Guarantee, ...]:
    """The contract's ``pg_bias`` guarantees of the TIS estimator with a cap."""
    return tuple(
        g
        for g in contract.guarantees
        if g.quantity == "pg_bias" and g.estimator == "tis" and g.cap is not None
    )


def _derived(contract: Contract, ids: set[str], budget) -> dict[str, tuple]:
    from kernel_contracts import bounds
    from kernel_contracts.verify.proving.obligations import discharge

    out = {}
    for d in bounds.derive(contract):
        if d.guarantee in ids:
            o = discharge(d, budget=budget)
            out[o.id] = (o.status, o.reason)
    return out


def _from_report_object(contract: Contract, report) -> dict[str, tuple]:
    if report.contract.canonical != contract.source.canonical:
        raise RoutingError(
            [f"report: a report of contract {report.contract.name!r} (sha256 "
             f"{report.contract.sha256[:12]}…), not of this contract {contract.name!r}"]
        )  # fmt: skip
    return {o.id: (o.status, o.reason) for o in report.obligations}


def _from_report_file(contract: Contract, path: str) -> dict[str, tuple]:
    from kernel_contracts.verify.proving.check.recheck import (
        ReportUnreadable,
        check_data,
        load_report,
    )

    try:
        data = load_report(path)
    except ReportUnreadable as err:
        raise RoutingError([f"report: {err}"]) from None
    canonical = hashlib.sha256(contract.source.canonical.encode("utf-8")).hexdigest()
    stored = data.get("contract") if isinstance(data, dict) else None
    if not isinstance(stored, dict) or stored.get("canonical_sha256") != canonical:
        raise RoutingError([f"report: {path} is not a report of this contract ({contract.name!r})"])
    result = check_data(data, report_dir=os.path.dirname(os.path.abspath(path)))
    if not result.ok:
        raise RoutingError(
            [f"report: {path} does not re-check ({len(result.differences)} difference(s), the "
             f"first: {result.differences[0]}); its verdicts are not used"]
        )  # fmt: skip
    return {o["id"]: (Status.parse(o["status"]), o.get("reason", "")) for o in data["obligations"]}


def _cap(contract: Contract, statuses: dict, wanted: str | None) -> tuple[Guarantee, Fraction]:
    candidates = tis_guarantees(contract)
    if wanted is not None:
        named = [g for g in candidates if g.id == wanted]
        if not named:
            raise RoutingError(
                [f"tis_guarantee: {wanted!r} is not a pg_bias guarantee of the TIS estimator "
                 f"with a cap (those of the contract: {[g.id for g in candidates]})"]
            )  # fmt: skip
        candidates = tuple(named)
    if not candidates:
        raise RoutingError(
            ["tis_correct: the contract has no pg_bias guarantee with estimator: tis and a cap, "
             "so no cap is proved for the importance weights"]
        )  # fmt: skip
    why = []
    for g in candidates:
        status, reason = statuses[g.id]
        if status is Status.PROVED:
            return g, exact(g.cap)
        why.append(f"{g.id} (cap {g.cap:g}) is {status.label}" + (f": {reason}" if reason else ""))
    raise RoutingError([f"tis_correct: no proved TIS cap: {'; '.join(why)}"])


def prepare(
    contract: Contract,
    *,
    report=None,
    tis_guarantee: str | None = None,
    budget=None,
) -> Router:
    """Settle ``contract``'s cap and guarantee verdicts for ``verify.pipeline.routing.route``.

    ``report``: a ``verify.Report`` of this contract or the path of a report file (re-checked
    in full); without one, the guarantees needed are derived and discharged here.
    ``tis_guarantee`` names the TIS guarantee whose cap to use; by default the first proved one,
    in contract order. ``budget``: what the solvers may spend deriving them
    (``verify.proving.solve.budget.Budget``; the default one when ``None``); a report file is
    re-checked with the budget it records. Raises ``RoutingError`` when Π can fire
    ``tis_correct`` (or a guarantee is named) and no proved cap exists, or when the report is
    unusable.
    """
    from kernel_contracts.verify.proving.render.report import Report

    if not isinstance(contract, Contract):
        raise RoutingError([f"contract: expected a loaded Contract, got {type(contract).__name__}"])
    g_ids = {g.id for g in contract.guarantees}
    needs_cap = tis_guarantee is not None or any(
        r.action == "tis_correct" for r in contract.escalation
    )
    wanted = {r.clause for r in contract.escalation if r.clause in g_ids}
    if needs_cap:
        wanted |= {g.id for g in tis_guarantees(contract)}
    if report is None:
        statuses, origin = _derived(contract, wanted, budget), "derived here"
    elif isinstance(report, (str, os.PathLike)):
        path = os.fspath(report)
        statuses, origin = _from_report_file(contract, path), path
    elif isinstance(report, Report):
        statuses, origin = _from_report_object(contract, report), "report"
    else:
        raise RoutingError(
            [f"report: expected a verify.Report or a report file path, got {type(report).__name__}"]
        )  # fmt: skip
    cap, cap_id = None, None
    if needs_cap:
        g, cap = _cap(contract, statuses, tis_guarantee)
        cap_id = g.id
    obligations = tuple((g.id, statuses[g.id][0]) for g in contract.guarantees if g.id in wanted)
    return Router(contract, cap, cap_id, obligations, static_clauses(contract), origin)
