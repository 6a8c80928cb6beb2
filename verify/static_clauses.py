"""Clause verdicts a proofs-only run can give: static runtime checks, and reasoned skips.

Without evidence nothing is measured, so numerical and statistical clauses are ``skipped``
with the reason. Runtime clauses are compared with the inference kernel's specification where
the contract itself decides the question (the KV-cache format; batch invariance against
dynamic batching); their other conditions hold or fail only on live traffic and are left to
the monitor. Observability clauses are checked online.
"""

from __future__ import annotations

from contracts import Contract, RuntimeClause
from verify.clauses import ClauseResult
from verify.status import Status

__all__ = ["NO_EVIDENCE", "skipped_measurements", "static_clauses"]

NO_EVIDENCE = "proofs-only run: no evidence given"
_ONLINE = ("batch_size", "sequence_length", "hardware")


def skipped_measurements(contract: Contract, reason: str = NO_EVIDENCE) -> tuple[ClauseResult, ...]:
    """A ``skipped`` verdict for every numerical and statistical clause, on each slice."""
    out = []
    for c in contract.numerical:
        out.append(
            ClauseResult(c.id, "numerical", c.slice, Status.SKIPPED, c.metric, "max",
                         float(c.max), reason=reason)
        )  # fmt: skip
    for c in contract.statistical:
        for s in c.slices:
            out.append(
                ClauseResult(c.id, "statistical", s, Status.SKIPPED, c.metric, c.statistic,
                             float(c.max), confidence=float(c.confidence), reason=reason)
            )  # fmt: skip
    return tuple(out)


def _runtime(contract: Contract, c: RuntimeClause) -> ClauseResult:
    kernel = contract.kernels.inference
    wrong, checked = [], []
    if c.kv_cache is not None:
        checked.append("kv_cache")
        if c.kv_cache != kernel.attention.kv_cache:
            wrong.append(
                f"kv_cache {c.kv_cache} but the inference kernel ({kernel.preset}) stores "
                f"{kernel.attention.kv_cache}"
            )
    if c.batch_invariant is not None:
        checked.append("batch_invariant")
        if c.batch_invariant and kernel.batching == "dynamic":
            wrong.append("batch_invariant: true but the inference kernel batches dynamically")
    online = [k for k in _ONLINE if getattr(c, k) is not None]
    if wrong:
        status, reason = Status.VIOLATED, "; ".join(wrong)
    elif online:
        status = Status.SKIPPED
        reason = f"{', '.join(online)}: checked online by the monitor"
        if checked:
            reason = f"{', '.join(checked)} agree with the kernel spec; {reason}"
    elif checked:
        status, reason = Status.HELD, f"{', '.join(checked)} agree with the kernel spec"
    else:
        status, reason = Status.SKIPPED, "no condition to check"
    return ClauseResult(c.id, "runtime", "all", status, "runtime", "check", None, reason=reason)


def static_clauses(contract: Contract) -> tuple[ClauseResult, ...]:
    """Verdicts for the runtime and observability clauses, decided from the contract alone."""
    out = [_runtime(contract, c) for c in contract.runtime]
    for c in contract.observability:
        out.append(
            ClauseResult(c.id, "observability", "all", Status.SKIPPED, "observability", "check",
                         None, reason="logging is checked online by the monitor")
        )  # fmt: skip
    return tuple(out)
