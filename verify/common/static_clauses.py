"""Runtime and observability clause verdicts, and the reasoned skips of a proofs-only run.

Without evidence nothing is measured, so numerical and statistical clauses are ``skipped``
with the reason. Runtime clauses are compared with the inference kernel's specification where
the contract itself decides the question (the KV-cache format; batch invariance against
dynamic batching). Their batch size and sequence length conditions are decided on the
evidence's runtime envelope (``evidence.sources[].runtime``, written by
``evidence.envelope.observe``), summed over the sources: any sequence certainly outside
the declared range → the clause is ``violated`` (the evidence was gathered where the contract
claims nothing); every sequence certainly inside → that condition holds; otherwise (a log
without ``batch_size``, lengths without ``position_offset``, or no evidence) it is unchecked.
A clause is ``held`` when every condition it states holds, ``violated`` when any fails, and
``skipped`` with the reason otherwise (``hardware`` is never recorded by evidence).
Observability clauses are checked online.
"""

from __future__ import annotations

from kernel_contracts.contracts import Contract, RuntimeClause
from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.status import Status

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


def _observed(evidence) -> tuple[int, dict, dict] | None:
    """Summed over the evidence sources that describe their runtime envelope: sequences, per
    condition the recorded extent, per (clause, condition) the counts outside and inside."""
    sources = evidence.get("sources") if isinstance(evidence, dict) else None
    if not isinstance(sources, list):
        return None
    found = [s["runtime"] for s in sources if isinstance(s, dict) and "runtime" in s]
    try:
        return _summed(found) if found else None
    except (AttributeError, KeyError, TypeError, ValueError):  # a malformed report: no envelope
        return None


def _summed(found) -> tuple[int, dict, dict]:
    sequences, extent, counts = 0, {}, {}
    for r in found:
        sequences += r["sequences"]
        for condition in ("batch_size", "sequence_length"):
            e, seen = r[condition], extent.setdefault(condition, {"recorded": 0})
            seen["recorded"] += e["recorded"]
            for key, pick in (("min", min), ("max", max)):
                if e[key] is not None:
                    seen[key] = e[key] if seen.get(key) is None else pick(seen[key], e[key])
        for c in r["clauses"]:
            got = counts.setdefault((c["clause"], c["condition"]), [0, 0])
            got[0] += c["outside"]
            got[1] += c["inside"]
    return sequences, extent, counts


_UNRECORDED = {
    "batch_size": "no batch_size recorded",
    "sequence_length": "a length without position_offset counts the response only",
}


def _condition(c: RuntimeClause, condition: str, observed) -> tuple[str, str]:
    """("held" | "violated" | "unchecked", why) for one condition of ``c`` on the evidence."""
    if observed is None:
        return "unchecked", f"{condition}: checked online by the monitor"
    sequences, extent, counts = observed
    lo, hi = getattr(c, condition)
    outside, inside = counts.get((c.id, condition), (0, 0))
    seen = extent[condition]
    shown = f" (recorded {seen['min']} to {seen['max']})" if seen.get("min") is not None else ""
    if outside:
        return "violated", (
            f"{condition}: {outside} of {sequences} sequences outside [{lo}, {hi}]{shown}"
        )
    if sequences and inside == sequences:
        return "held", f"{condition}: all {sequences} sequences inside [{lo}, {hi}]"
    if not seen["recorded"]:
        return "unchecked", f"{condition}: not recorded by the evidence"
    return "unchecked", (
        f"{condition}: {sequences - inside} of {sequences} sequences not known to lie inside "
        f"[{lo}, {hi}] ({_UNRECORDED[condition]})"
    )


def _runtime(contract: Contract, c: RuntimeClause, observed=None) -> ClauseResult:
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
    if observed is not None:
        held, unchecked = [], []
        for condition in ("batch_size", "sequence_length"):
            if getattr(c, condition) is None:
                continue
            verdict, why = _condition(c, condition, observed)
            {"held": held, "violated": wrong, "unchecked": unchecked}[verdict].append(why)
        if c.hardware is not None:
            unchecked.append("hardware: not recorded by the evidence")
        samples = observed[0]
        if wrong:
            status, reason = Status.VIOLATED, "; ".join(wrong)
        else:
            parts = [f"{', '.join(checked)} agree with the kernel spec"] if checked else []
            parts += held + unchecked
            status = Status.SKIPPED if unchecked else Status.HELD
            reason = "; ".join(parts) or "no condition to check"
        return ClauseResult(c.id, "runtime", "all", status, "runtime", "check", None,
                            samples=samples, reason=reason)  # fmt: skip
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


def static_clauses(contract: Contract, evidence=None) -> tuple[ClauseResult, ...]:
    """Verdicts for the runtime and observability clauses, decided from the contract and the
    runtime envelope of ``evidence`` (a report's ``evidence`` section; see the module
    docstring)."""
    observed = _observed(evidence)
    out = [_runtime(contract, c, observed) for c in contract.runtime]
    for c in contract.observability:
        out.append(
            ClauseResult(c.id, "observability", "all", Status.SKIPPED, "observability", "check",
                         None, reason="logging is checked online by the monitor")
        )  # fmt: skip
    return tuple(out)
