"""From a contract to one framework's settings: every request mapped, merged and proved.

``plan`` maps each driving guarantee (``verify.pipeline.export.request``) through the framework and
merges the ``(key, value)`` pairs; it refuses, with every problem at once, a guarantee the
framework has no counterpart for, a cap of 0, and two guarantees that set one key to different
values (a run uses one estimator; ``--guarantee`` picks which), and, when the release is named,
an estimator the framework has only from a later release on (``Framework.since``). ``prove``
then discharges the obligations of exactly those guarantees (``bounds.derive``,
``verify.proving.obligations.discharge``: z3 and sympy, never JAX) and names each one that is not
``proved``. Where the framework computes an estimator's weight from the log-ratio clamped to
±R (``Framework.ratio_clamp``), the export also needs the guarantee's premises to prove
|log w| ≤ R on every token (a ``token_log_ratio`` obligation with the same premises), so that
the clamp never changes a weight. Messages are
``file:line:col: guarantees[i].key: message``, as contract errors are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from kernel_contracts.contracts import Contract, Guarantee
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.pipeline.export.request import (
    MAIN,
    ExportError,
    Framework,
    NoCounterpart,
    Request,
    Value,
    number,
    parse_version,
    requests_of,
)
from kernel_contracts.verify.pipeline.export.scalars import scalar

__all__ = ["Export", "Setting", "plan", "premises_of", "prove"]


@dataclass(frozen=True)
class Setting:
    """One framework key, its value and the guarantees it comes from."""

    key: str
    value: Value
    guarantees: tuple[str, ...]


@dataclass(frozen=True)
class Export:
    """The settings of one contract for one framework, in the order the framework lists them."""

    contract: Contract
    framework: Framework
    requests: tuple[Request, ...]
    settings: tuple[Setting, ...]


def _where(contract: Contract, key: str) -> str:
    """``file:line:col: key`` (or ``file: key``) for a key path of the contract."""
    at = contract.source.where(key)
    place = f"{contract.source.path}:{at[0]}:{at[1]}" if at else contract.source.path
    return f"{place}: {key}"


def _index(contract: Contract, gid: str) -> int:
    return next(i for i, g in enumerate(contract.guarantees) if g.id == gid)


def _key(contract: Contract, r: Request, field: str) -> str:
    return _where(contract, f"guarantees[{_index(contract, r.guarantee)}].{field}")


def _same(a: Value, b: Value) -> bool:
    return type(a) is type(b) and a == b


def _release(release: tuple[int, int]) -> str:
    return "main" if release == MAIN else f"{release[0]}.{release[1]}"


def _first(first: str) -> tuple[int, int]:
    """The release a ``Framework.since`` entry names: ``X.Y``, or ``main`` for a feature that
    only the checked main-branch commit has."""
    return MAIN if first == "main" else parse_version(first)


def plan(
    contract: Contract,
    framework: Framework,
    wanted: tuple[str, ...] = (),
    release: tuple[int, int] | None = None,
) -> Export:
    """The settings ``framework`` needs for ``contract``'s driving guarantees (those named in
    ``wanted``, or all), for ``release`` of the framework when it is given (as
    ``request.check_version`` returns it). Raises ``ExportError`` (exit 2) naming every
    problem."""
    requests = requests_of(contract, wanted)
    if not requests:
        raise ExportError(
            f"{_where(contract, 'guarantees')}: no guarantee maps to a {framework.name} setting "
            "(export takes pg_bias guarantees with an estimator other than plain, and "
            "clip_budget guarantees)"
        )
    problems: list[str] = []
    merged: dict[str, tuple[Value, list[str]]] = {}
    for r in requests:
        if r.cap is not None and r.cap == 0:
            problems.append(f"{_key(contract, r, 'cap')}: cap 0 makes every weight 0, so the "
                            f"estimator learns nothing; no {framework.name} setting is written "
                            "for it")  # fmt: skip
            continue
        try:
            pairs = framework.settings(r)
        except NoCounterpart as why:
            field = "quantity" if r.what == "clip_budget" else "estimator"
            problems.append(f"{_key(contract, r, field)}: {framework.name} has no counterpart "
                            f"for {r.summary}: {why}")  # fmt: skip
            continue
        first, why = framework.since.get(r.what, (None, ""))
        if release is not None and first is not None and release < _first(first):
            field = "estimator"
            problems.append(f"{_key(contract, r, field)}: {framework.name} "
                            f"{_release(release)} has no counterpart for {r.summary}: {why} "
                            f"(from {framework.name} {first} on)")  # fmt: skip
            continue
        for key, value in pairs:
            if key not in merged:
                merged[key] = (value, [r.guarantee])
            elif _same(merged[key][0], value):
                merged[key][1].append(r.guarantee)
            else:
                before = merged[key][1][0]
                problems.append(
                    f"{_key(contract, r, 'id')}: {r.guarantee} sets {key} to {scalar(value)} "
                    f"but {before} sets it to {scalar(merged[key][0])}; a run uses one "
                    "correction, so export one of them with --guarantee"
                )
    if problems:
        raise ExportError("\n".join(dict.fromkeys(problems)))
    settings = tuple(Setting(k, v, tuple(ids)) for k, (v, ids) in merged.items())
    return Export(contract, framework, requests, settings)


def prove(export: Export, *, budget=None) -> dict[str, tuple[Status, str]]:
    """Discharge the obligation of every guarantee ``export`` rests on, within ``budget`` (a
    ``verify.proving.solve.budget.Budget``; the default one when ``None``): ``{id: (status,
    reason)}``. Raises ``ExportError`` (exit 1) naming each one that is not ``proved``."""
    from kernel_contracts import bounds
    from kernel_contracts.verify.proving.obligations import decimal, discharge

    contract = export.contract
    ids = {r.guarantee for r in export.requests}
    chosen = tuple(g for g in contract.guarantees if g.id in ids)
    clamps = {r.guarantee: bound for r in export.requests
              if (bound := _clamp(export.framework, r, contract)) is not None}  # fmt: skip
    within = tuple(_log_ratio_within(g, clamps[g.id]) for g in chosen if g.id in clamps)
    # one guarantee's derivation reads the contract and that guarantee alone: derive only these
    needed = dataclasses.replace(contract, guarantees=chosen + within)
    found = {}
    for d in bounds.derive(needed):
        if d.guarantee in ids or d.guarantee in {g.id for g in within}:
            o = discharge(d, budget=budget)
            detail = o.reason
            if o.bound_interval is not None:
                bound = decimal(sum(o.bound_interval) / 2)
                detail = "; ".join(filter(None, [f"bound {bound} vs max {decimal(o.threshold)}",
                                                 detail]))  # fmt: skip
            found[o.id] = (o.status, detail)
    problems = []
    name = export.framework.name
    for r in export.requests:
        status, reason = found.get(r.guarantee, (Status.UNKNOWN, "no obligation was derived"))
        if status is not Status.PROVED:
            problems.append(
                f"{_key(contract, r, 'id')}: {r.guarantee} ({r.summary}) is {status.label}, so "
                f"no {name} setting is written" + (f": {reason}" if reason else "")
            )
        elif r.guarantee in clamps:
            bound = clamps[r.guarantee]
            status, reason = found.pop(_within_id(r.guarantee), (Status.UNKNOWN, "not derived"))
            if status is not Status.PROVED:
                problems.append(
                    f"{_key(contract, r, 'from')}: {name} computes the {r.what} weight from "
                    + _clamped(export.framework, r, bound)
                    + f"; the premises of {r.guarantee} do not prove that on every token "
                    f"({status.label}"
                    + (f": {reason})" if reason else ")")
                    + f", so no {name} setting is written"
                )
    if problems:
        raise ExportError("\n".join(problems), code=1)
    return found


# e^-20 < 2.1e-9: a sequence mask from a lower end at least this keeps no W the clamp raises
_ABOVE_LOW_CLAMP = Fraction(21, 10**10)


def _clamp(framework: Framework, r: Request, contract: Contract) -> Fraction | None:
    """The |log w| every token must keep for ``framework``'s clamp of the log-ratio to leave
    ``r``'s weight alone (``Framework.ratio_clamp``, ``Framework.sequence_clamp``), or
    ``None``: R for a token weight; R/L for a sequence weight, a sum of at most L log-ratios (L
    the guarantee's horizon, ``policy.max_new_tokens`` unless it sets one), but nothing for a
    sequence mask whose lower end is above e^−20 (a kept W is at least lo; its upper end is at
    most e^20, or the mapping refuses it)."""
    if r.what in framework.ratio_clamp:
        return framework.ratio_clamp[r.what]
    if r.what not in framework.sequence_clamp:
        return None
    if r.band is not None and r.band[0] >= _ABOVE_LOW_CLAMP:
        return None
    g = next(g for g in contract.guarantees if g.id == r.guarantee)
    return framework.sequence_clamp[r.what] / (g.horizon or contract.policy.max_new_tokens)


def _clamped(framework: Framework, r: Request, bound: Fraction) -> str:
    """What the clamp does to ``r``'s weight and which |log w| per token leaves it alone."""
    if r.what in framework.ratio_clamp:
        beyond = framework.beyond_clamp.format(bound=number(bound))
        return (
            f"{beyond}, so its weight equals the estimator's only where |log w| <= {number(bound)}"
        )
    whole = framework.sequence_clamp[r.what]  # an integer, as is the horizon L = whole/bound
    return (
        f"the sum of a sequence's log-ratios clamped to [-{whole}, {whole}] (a W under "
        f"e^-{whole} is raised to it), so its weight equals the estimator's where each of the "
        f"at most {whole / bound} tokens has |log w| <= {number(bound)}"
    )


def _within_id(gid: str) -> str:
    return f"{gid}.log_ratio_within_clamp"


def _log_ratio_within(g: Guarantee, bound: Fraction) -> Guarantee:
    """A ``token_log_ratio`` guarantee on ``g``'s premises: |log w| ≤ ``bound`` per token."""
    return Guarantee(_within_id(g.id), "token_log_ratio", float(bound), g.from_, assume=g.assume)


def premises_of(
    export: Export, evidence_paths: tuple[str, ...] = (), *, trust_code: bool = False
) -> tuple[str, ...]:
    """Check the premises of every guarantee ``export`` rests on against the evidence (the
    contract's ``evidence:`` section, or ``evidence_paths``), as a run would
    (``verify.common.support``); ``trust_code`` is the consent a user model's import needs
    (``verify.common.consent``). Raises ``ExportError`` (exit 1) naming each guarantee that rests on
    a premise the evidence violates, or (exit 2) for unusable evidence; returns one line for each
    guarantee whose premises the evidence left unchecked. Without evidence: nothing to say."""
    from kernel_contracts.evidence.sources import EvidenceError
    from kernel_contracts.verify.proving.runner import (
        clause_verdicts,
        evidence_given,
        premise_support,
    )

    contract = export.contract
    if not evidence_given(contract, evidence_paths):
        return ()
    try:
        clauses, _ = clause_verdicts(contract, evidence_paths, trust_code=trust_code)
    except EvidenceError as err:
        raise ExportError(str(err)) from None
    support = {s.guarantee: s for s in premise_support(contract, evidence_paths, clauses)}
    reasons = {c.id: c.reason for c in clauses if c.status is Status.VIOLATED}
    problems, unchecked = [], []
    for r in export.requests:
        s = support.get(r.guarantee)
        if s is None or s.status is Status.HELD:
            continue
        if s.status is Status.VIOLATED:
            why = "; ".join(f"{p}: {reasons.get(p, 'violated')}" for p in s.violated)
            problems.append(
                f"{_key(contract, r, 'id')}: {r.guarantee} ({r.summary}) rests on premise(s) "
                f"{', '.join(s.violated)}, which the evidence violates, so no "
                f"{export.framework.name} setting is written ({why})"
            )
        else:
            unchecked.append(
                f"{r.guarantee} ({r.summary}) rests on premise(s) {', '.join(s.unchecked)} that "
                "the given evidence did not decide: the setting is proved only if they hold"
            )
    if problems:
        raise ExportError("\n".join(problems), code=1)
    return tuple(unchecked)
