"""One verification run: contract → obligations and clause verdicts → report.

Evidence is measured only when the contract has an ``evidence:`` section or evidence paths
are given; only then is the measuring module (and with it JAX) imported. With a derivation
cache (``verify.proving.cache``) a run whose contract and code are unchanged rebuilds the
obligations from the cache and has z3 decide their stored queries (``verify.proving.replay``):
then neither sympy nor the bound chain is imported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kernel_contracts.contracts import Contract
from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.escalation import decide
from kernel_contracts.verify.common.static_clauses import skipped_measurements, static_clauses
from kernel_contracts.verify.common.support import Support, support
from kernel_contracts.verify.proving.obligations import Obligation
from kernel_contracts.verify.proving.render.report import ContractInfo, Report, python_version
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.budget import Budget

__all__ = [
    "NO_EVIDENCE_MODULE",
    "clause_verdicts",
    "evidence_given",
    "premise_support",
    "run",
    "toolkit_version",
]

NO_EVIDENCE_MODULE = "evidence measurement not available"


def toolkit_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("kernel-contracts")
    except metadata.PackageNotFoundError:
        return "source checkout"


def _order(contract: Contract) -> dict[tuple[str, str], int]:
    keys = [(c.id, c.slice) for c in contract.numerical]
    keys += [(c.id, s) for c in contract.statistical for s in c.slices]
    keys += [(c.id, "all") for c in (*contract.runtime, *contract.observability)]
    return {k: i for i, k in enumerate(keys)}


def evidence_given(contract: Contract, paths: Sequence[str] = ()) -> bool:
    """Whether a run of ``contract`` with evidence ``paths`` measures evidence."""
    return bool(paths or contract.evidence.emulate or contract.evidence.logprobs)


def _measure(
    contract, paths, quiet, stderr, trust_code
) -> tuple[tuple[ClauseResult, ...], dict | None]:
    if not evidence_given(contract, paths):
        return skipped_measurements(contract), None
    try:
        from kernel_contracts.verify import decide as evidence
    except ImportError:
        return skipped_measurements(contract, NO_EVIDENCE_MODULE), None
    results, info = evidence.evaluate(
        contract, paths=tuple(paths), quiet=quiet, stderr=stderr, trust_code=trust_code
    )
    return tuple(results), dict(info)


def clause_verdicts(
    contract: Contract,
    evidence_paths: Sequence[str] = (),
    *,
    quiet: bool = True,
    stderr=None,
    trust_code: bool = False,
) -> tuple[tuple[ClauseResult, ...], dict | None]:
    """Every clause verdict of a run, in contract order, and the report's ``evidence`` part:
    one per (clause, slice) and evidence source, the static ones where none was measured.
    ``trust_code``: the consent a user model's import needs (``verify.decide.evaluate``).
    Raises ``verify.decide.EvidenceError`` for unusable evidence."""
    measured, info = _measure(contract, tuple(evidence_paths), quiet, stderr, trust_code)
    found = {(c.id, c.slice) for c in measured}
    static = static_clauses(contract, info)
    parts = [*measured, *(c for c in static if (c.id, c.slice) not in found)]
    order = _order(contract)
    return tuple(sorted(parts, key=lambda c: order.get((c.id, c.slice), len(order)))), info


def premise_support(
    contract: Contract, evidence_paths: Sequence[str], clauses: Sequence[ClauseResult]
) -> tuple[Support, ...]:
    """What the evidence says of each guarantee's premises (``verify.common.support``); none when
    the run measures no evidence."""
    if not evidence_given(contract, evidence_paths):
        return ()
    return support(
        ((g.id, tuple(g.from_)) for g in contract.guarantees), ((c.id, c.status) for c in clauses)
    )


def _versions():
    from kernel_contracts.verify.proving.replay import Versions

    return Versions(toolkit_version(), {"z3": smt.z3_version(), "cvc5": smt.cvc5_version()})


def _derive_and_solve(contract: Contract, derive: Callable | None, budget: Budget, timing):
    """The obligations of ``contract``, derived and decided in this run; ``(obligations, how
    many come from guarantees)``."""
    from kernel_contracts.verify.proving.kernel_obligations import kernel_obligations
    from kernel_contracts.verify.proving.obligations import discharge

    t0 = time.perf_counter()
    if derive is None:
        from kernel_contracts import bounds

        derive = bounds.derive
    derivations = derive(contract)
    t1 = time.perf_counter()
    obligations: tuple[Obligation, ...] = tuple(discharge(d, budget=budget) for d in derivations)
    # int8 kernels: the exactness preconditions of their integer accumulation, after the
    # guarantees (ids "<side>:int32", "<side>:fp32")
    obligations += kernel_obligations(contract, budget=budget)
    timing["derive"] = _ms(t0, t1)
    timing["solve"] = _ms(t1, time.perf_counter())
    return obligations, len(derivations)


def _ms(t0: float, t1: float) -> float:
    return round((t1 - t0) * 1000, 3)


def _obligations(contract: Contract, derive, budget: Budget, cache):
    """The decided obligations, the versions and the timing of the proofs part: rebuilt from the
    cache where it holds this contract and code (``derive`` is then the time to find and read
    the entry, ``solve`` z3's on its queries), else derived and decided, then stored (``derive``
    includes the look-up and the store). The timing has the same keys either way."""
    timing: dict[str, float] = {}
    if cache is None or derive is not None:
        obligations, _ = _derive_and_solve(contract, derive, budget, timing)
        return obligations, _versions(), timing
    from kernel_contracts.verify.proving import cache as caching
    from kernel_contracts.verify.proving import replay

    t0 = time.perf_counter()
    try:
        key = caching.key(contract, budget=budget)
    except (OSError, LookupError):  # sources that cannot be read cannot key an entry
        key = None
    payload = caching.load(cache, key) if key else None
    versions = replay.versions(payload) if payload else None
    t1 = time.perf_counter()
    if versions is not None:
        obligations = replay.replay(payload, budget=budget)
        if obligations is not None:
            t2 = time.perf_counter()
            return obligations, versions, {"derive": _ms(t0, t1), "solve": _ms(t1, t2)}
    t2 = time.perf_counter()  # a miss, or z3 answered otherwise than the entry: derive afresh
    obligations, guarantees = _derive_and_solve(contract, None, budget, timing)
    t3 = time.perf_counter()
    versions = _versions()
    stored = replay.entry(obligations, guarantees, versions)
    if key is not None and stored is not None:
        caching.store(cache, key, stored)
    timing["derive"] += _ms(t0, t2) + _ms(t3, time.perf_counter())
    return obligations, versions, {k: round(v, 3) for k, v in timing.items()}


def run(
    contract: Contract,
    *,
    evidence_paths: Sequence[str] = (),
    budget: Budget | None = None,
    quiet: bool = True,
    stderr=None,
    derive: Callable | None = None,
    cache=None,
    trust_code: bool = False,
) -> Report:
    """Verify ``contract``; raises ``verify.decide.EvidenceError`` for unusable evidence, and
    for a user model's module without ``trust_code`` (the user's consent to import it).

    ``cache`` (a ``verify.proving.cache.Cache``) lets the proofs part replay a stored derivation
    (``verify.proving.replay``); it is not used with a ``derive`` of the caller's. ``budget``:
    what the solvers may spend (``verify.proving.solve.budget``; the default one when ``None``),
    recorded in the report."""
    budget = budget or Budget()
    obligations, versions, timing = _obligations(contract, derive, budget, cache)
    t2 = time.perf_counter()
    clauses, info = clause_verdicts(
        contract, evidence_paths, quiet=quiet, stderr=stderr, trust_code=trust_code
    )
    t3 = time.perf_counter()
    verdicts = [(o.id, o.status) for o in obligations] + [(c.id, c.status) for c in clauses]
    premises = premise_support(contract, evidence_paths, clauses)
    source = contract.source
    return Report(
        contract=ContractInfo(source.path, source.sha256, source.canonical, contract.name),
        toolkit=versions.toolkit,
        python=python_version(),
        solvers=versions.solvers,
        obligations=obligations,
        clauses=clauses,
        evidence=info,
        escalation=decide(contract.escalation, verdicts),
        support=premises,
        timing={**timing, "evidence": _ms(t2, t3)},
        budget=budget,
    )
