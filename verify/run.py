"""One verification run: contract → obligations and clause verdicts → report.

Evidence is measured only when the contract has an ``evidence:`` section or evidence paths
are given; only then is the measuring module (and with it JAX) imported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from importlib import metadata

from contracts import Contract
from verify import smt
from verify.clauses import ClauseResult
from verify.escalation import decide
from verify.kernel_obligations import kernel_obligations
from verify.obligations import Obligation, discharge
from verify.report import ContractInfo, Report, python_version
from verify.static_clauses import skipped_measurements, static_clauses

__all__ = ["NO_EVIDENCE_MODULE", "run", "toolkit_version"]

NO_EVIDENCE_MODULE = "evidence measurement not available"


def toolkit_version() -> str:
    try:
        return metadata.version("kernel-contracts")
    except metadata.PackageNotFoundError:
        return "source checkout"


def _order(contract: Contract) -> dict[tuple[str, str], int]:
    keys = [(c.id, c.slice) for c in contract.numerical]
    keys += [(c.id, s) for c in contract.statistical for s in c.slices]
    keys += [(c.id, "all") for c in (*contract.runtime, *contract.observability)]
    return {k: i for i, k in enumerate(keys)}


def _measure(contract, paths, quiet, stderr) -> tuple[tuple[ClauseResult, ...], dict | None]:
    wanted = paths or contract.evidence.emulate or contract.evidence.logprobs
    if not wanted:
        return skipped_measurements(contract), None
    try:
        from verify import evidence
    except ImportError:
        return skipped_measurements(contract, NO_EVIDENCE_MODULE), None
    results, info = evidence.evaluate(contract, paths=tuple(paths), quiet=quiet, stderr=stderr)
    return tuple(results), dict(info)


def run(
    contract: Contract,
    *,
    evidence_paths: Sequence[str] = (),
    timeout_ms: int = 5000,
    quiet: bool = True,
    stderr=None,
    derive: Callable | None = None,
) -> Report:
    """Verify ``contract``; raises ``verify.evidence.EvidenceError`` for unusable evidence."""
    t0 = time.perf_counter()
    if derive is None:
        import bounds

        derive = bounds.derive
    derivations = derive(contract)
    t1 = time.perf_counter()
    obligations: tuple[Obligation, ...] = tuple(
        discharge(d, timeout_ms=timeout_ms) for d in derivations
    )
    # int8 kernels: the exactness preconditions of their integer accumulation, after the
    # guarantees (ids "<side>:int32", "<side>:fp32")
    obligations += kernel_obligations(contract, timeout_ms=timeout_ms)
    t2 = time.perf_counter()
    measured, info = _measure(contract, tuple(evidence_paths), quiet, stderr)
    t3 = time.perf_counter()
    # one verdict per (clause, slice) and evidence source; the static ones where none measured
    found = {(c.id, c.slice) for c in measured}
    static = static_clauses(contract, info)
    parts = [*measured, *(c for c in static if (c.id, c.slice) not in found)]
    order = _order(contract)
    clauses = tuple(sorted(parts, key=lambda c: order.get((c.id, c.slice), len(order))))
    verdicts = [(o.id, o.status) for o in obligations] + [(c.id, c.status) for c in clauses]
    source = contract.source
    return Report(
        contract=ContractInfo(source.path, source.sha256, source.canonical, contract.name),
        toolkit=toolkit_version(),
        python=python_version(),
        solvers={"z3": smt.z3_version(), "cvc5": smt.cvc5_version()},
        obligations=obligations,
        clauses=clauses,
        evidence=info,
        escalation=decide(contract.escalation, verdicts),
        timing={
            "derive": round((t1 - t0) * 1000, 3),
            "solve": round((t2 - t1) * 1000, 3),
            "evidence": round((t3 - t2) * 1000, 3),
        },
    )
