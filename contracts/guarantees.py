"""Reading ``guarantees``: the claims the thresholds must buy, with per-quantity fields.

Each quantity takes its own fields: ``reward_drift`` a ``reward_range`` [a, b] with a < b;
``pg_bias`` a ``score_norm`` G > 0, an ``advantage`` bound A_max > 0 and an ``estimator`` with its
parameters (``tis`` and ``seq_tis`` a ``cap`` c ≥ 0, ``mis`` a ``cap`` c > 1, ``ppo_clip`` a
``clip_epsilon`` in (0, 1), ``icepop`` and ``geo_mask`` a ``band`` [lo, hi] with 0 ≤ lo < 1 < hi,
``tv_mask`` a ``threshold`` in (0, 1), ``kl_mask`` a ``threshold`` > 0, ``sapo`` its two gate
``temperatures`` [τ_pos, τ_neg], each > 0, ``vespo`` its ``gamma`` [k_pos, λ_pos, k_neg, λ_neg],
each > 0, ``clip_cov`` a ``clip_epsilon``, a ``cov_fraction`` ρ in (0, 1] and a ``cov_band``
[lb, ub] with lb < ub, ``kl_cov`` a ``cov_fraction`` and a ``kl_coef`` κ ≥ 0); ``clip_budget`` a
``clip_epsilon`` in (0, 1).
Sequence-scope guarantees use ``policy.max_new_tokens`` as horizon unless ``horizon`` is given.
"""

from __future__ import annotations

from kernel_contracts.contracts.checks import (
    Checker,
    did_you_mean,
    param_range,
    show,
    sub,
    valid_band,
)
from kernel_contracts.contracts.fields import (
    ASSUMPTIONS,
    ESTIMATOR_PARAMS,
    ESTIMATORS,
    OBJECTS,
    QUANTITIES,
    QUANTITY_FIELDS,
    QUANTITY_REQUIRED,
)
from kernel_contracts.contracts.model import Guarantee, Policy
from kernel_contracts.contracts.rejection import RejectionError, parse_rejection
from kernel_contracts.contracts.sections import Names

__all__ = ["read_guarantee"]

_SCOPES = {q: ("token",) for q in QUANTITIES} | {
    "sequence_tv": ("sequence",),
    "reward_drift": ("token", "sequence"),
}
_PREMISE_FAMILIES = ("numerical", "statistical", "runtime")
# how a missing estimator parameter is named in the message
_PARAM_NAMES = {"cap": "a cap", "clip_epsilon": "clip_epsilon", "band": "a band",
                "threshold": "a threshold", "reject": "reject (its criteria)",
                "reject_threshold": "reject_threshold",
                "temperatures": "temperatures [tau_pos, tau_neg]",
                "gamma": "gamma [k_pos, lambda_pos, k_neg, lambda_neg]",
                "cov_fraction": "cov_fraction (the share of tokens it picks)",
                "cov_band": "cov_band [lb, ub]", "kl_coef": "kl_coef"}  # fmt: skip


def read_guarantee(
    ck: Checker, value, key: str, names: Names, policy: Policy | None
) -> Guarantee | None:
    mark = ck.failures
    f = OBJECTS["guarantee"]
    m = ck.mapping(value, key, f.known, f.required)
    if m is None:
        return None
    got: dict = {}
    if "id" in m:
        got["id"] = ck.ident(m["id"], sub(key, "id"))
    quantity = None
    if "quantity" in m:
        quantity = got["quantity"] = ck.choice(m["quantity"], sub(key, "quantity"), QUANTITIES)
    if "max" in m:
        got["max"] = ck.number(m["max"], sub(key, "max"), lo=0)
    if "from" in m:
        got["from_"] = _premises(ck, m["from"], sub(key, "from"), names)
    if "assume" in m:
        got["assume"] = _assumptions(ck, m["assume"], sub(key, "assume"))
    got.update(_fields(ck, m, key, quantity))
    if quantity is not None:
        for field in QUANTITY_REQUIRED.get(quantity, ()):
            if field not in m:
                ck.report(sub(key, field), f"missing required key: quantity {quantity} needs it")
    if "scope" in m:
        scope = got.get("scope")
    else:
        scope = got["scope"] = "sequence" if quantity == "sequence_tv" else "token"
    if "horizon" in got and scope is not None and scope != "sequence":
        ck.report(sub(key, "horizon"), "applies only to scope: sequence")
    if scope == "sequence" and "horizon" not in m and policy is not None:
        got["horizon"] = policy.max_new_tokens
    # an estimator that could not be read is reported once: its parameters are not checked
    # against it (a typo ``tiss`` would also make ``cap`` "apply only to" other estimators)
    if quantity == "pg_bias" and ("estimator" not in m or got.get("estimator") is not None):
        _estimator_params(ck, m, key, got.get("estimator", "plain"))
    if got.get("reject") is not None and got.get("reject_threshold") is not None:
        try:
            parse_rejection(got["reject"], got["reject_threshold"])
        except RejectionError as err:
            ck.report(sub(key, "reject"), str(err))
    return Guarantee(**got) if ck.failures == mark else None


def _estimator_params(ck: Checker, m: dict, key: str, estimator: str) -> None:
    """Each parameter an estimator needs is given, and no other estimator's parameter is."""
    needs = ESTIMATOR_PARAMS.get(estimator, ())
    for field, name in _PARAM_NAMES.items():
        if field in needs and field not in m:
            ck.report(sub(key, field), f"missing required key: estimator {estimator} needs {name}")
        elif field in m and field not in needs:
            users = [e for e, keys in ESTIMATOR_PARAMS.items() if field in keys]
            either = ", ".join(users[:-1]) + f" or {users[-1]}" if len(users) > 1 else users[0]
            ck.report(sub(key, field), f"applies only to estimator {either}")


def _fields(ck: Checker, m: dict, key: str, quantity: str | None) -> dict:
    """The per-quantity fields, each type-checked, and refused where the quantity has no use."""
    got: dict = {}
    readers = {
        "scope": lambda v, k: _scope(ck, v, k, quantity),
        "horizon": lambda v, k: ck.integer(v, k, lo=1),
        "reward_range": lambda v, k: _reward_range(ck, v, k),
        "score_norm": lambda v, k: ck.number(v, k, 0, lo_open=True),
        "advantage": lambda v, k: ck.number(v, k, 0, lo_open=True),
        "estimator": lambda v, k: ck.choice(v, k, ESTIMATORS),
        "cap": lambda v, k: _param(ck, v, k, got.get("estimator"), "cap"),
        "clip_epsilon": lambda v, k: _param(ck, v, k, got.get("estimator"), "clip_epsilon"),
        "band": lambda v, k: _band(ck, v, k),
        "threshold": lambda v, k: _param(ck, v, k, got.get("estimator"), "threshold"),
        "reject": lambda v, k: ck.string(v, k),
        "reject_threshold": lambda v, k: _reject_threshold(ck, v, k),
        "temperatures": lambda v, k: _temperatures(ck, v, k),
        "gamma": lambda v, k: _gamma(ck, v, k),
        "cov_fraction": lambda v, k: _param(ck, v, k, got.get("estimator"), "cov_fraction"),
        "cov_band": lambda v, k: _cov_band(ck, v, k),
        "kl_coef": lambda v, k: _param(ck, v, k, got.get("estimator"), "kl_coef"),
    }
    for field, read in readers.items():
        if field not in m:
            continue
        if quantity is not None and field not in QUANTITY_FIELDS[quantity]:
            users = [q for q in QUANTITIES if field in QUANTITY_FIELDS[q]]
            ck.report(sub(key, field), f"not used by quantity {quantity} (only {', '.join(users)})")
            continue
        got[field] = read(m[field], sub(key, field))
    return got


def _scope(ck: Checker, value, key: str, quantity: str | None) -> str | None:
    scope = ck.choice(value, key, ("token", "sequence"))
    if scope is not None and quantity is not None and scope not in _SCOPES[quantity]:
        ck.report(key, f"quantity {quantity} has scope {_SCOPES[quantity][0]} only")
        return None
    return scope


def _reward_range(ck: Checker, value, key) -> tuple[float, float] | None:
    pair = ck.pair(value, key, lambda v, k: ck.number(v, k), open_ends=False)
    if pair is not None and pair[0] == pair[1]:
        ck.report(key, f"needs a < b, got [{show(pair[0])}, {show(pair[1])}]")
        return None
    return pair


def _param(ck: Checker, value, key, estimator: str | None, name: str) -> float | None:
    """An estimator's numeric parameter, within ``param_range``."""
    r = param_range(estimator, name)
    return ck.number(value, key, r.lo, r.hi, lo_open=r.lo_open, hi_open=r.hi_open)


def _reject_threshold(ck: Checker, value, key) -> str | None:
    """kl_reject's thresholds: a positive number, or verl's comma-separated string."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = ck.number(value, key, 0, lo_open=True)
        return None if number is None else show(number)
    return ck.string(value, key)


def _numbers(ck: Checker, value, key, items: tuple[str, ...], positive: bool) -> tuple | None:
    """A list of ``len(items)`` numbers named ``items`` (each > 0 where ``positive``): the one
    reader of sapo's temperatures, vespo's gamma and clip_cov's cov_band."""
    what = f"a list [{', '.join(items)}] of {len(items)} numbers"
    if not isinstance(value, list):
        ck.expected(key, what, value)
        return None
    if len(value) != len(items):
        ck.report(key, f"expected {what}, got {len(value)} items")
        return None
    if positive:
        return ck.each(value, key, lambda v, k: ck.number(v, k, 0, lo_open=True))
    return ck.each(value, key, lambda v, k: ck.number(v, k))


def _temperatures(ck: Checker, value, key) -> tuple[float, float] | None:
    """sapo's [τ_pos, τ_neg]: two positive numbers, in either order."""
    return _numbers(ck, value, key, ("tau_pos", "tau_neg"), positive=True)


def _gamma(ck: Checker, value, key) -> tuple[float, float, float, float] | None:
    """vespo's [k_pos, λ_pos, k_neg, λ_neg]: four positive numbers."""
    return _numbers(ck, value, key, ("k_pos", "lambda_pos", "k_neg", "lambda_neg"), positive=True)


def _cov_band(ck: Checker, value, key) -> tuple[float, float] | None:
    """clip_cov's covariance band [lb, ub]: two numbers with lb < ub (either may be negative)."""
    pair = _numbers(ck, value, key, ("lb", "ub"), positive=False)
    if pair is not None and not pair[0] < pair[1]:
        ck.report(key, f"needs lb < ub, got [{show(pair[0])}, {show(pair[1])}]")
        return None
    return pair


def _band(ck: Checker, value, key) -> tuple[float, float] | None:
    pair = ck.pair(value, key, lambda v, k: ck.number(v, k, 0), open_ends=False)
    if pair is not None and not valid_band(*pair):
        ck.report(key, f"needs 0 <= lo < 1 < hi, got [{show(pair[0])}, {show(pair[1])}]")
        return None
    return pair


def _premises(ck: Checker, value, key: str, names: Names) -> tuple[str, ...] | None:
    ids = ck.each(value, key, lambda v, k: ck.ident(v, k), nonempty=True)
    if ids is None:
        return None
    seen: set[str] = set()
    for i, clause in enumerate(ids):
        where = sub(key, i)
        family = names.clauses.get(clause)
        if clause in seen:
            ck.report(where, f"duplicate premise {show(clause)}")
        elif clause in names.guarantees:
            ck.report(where, f"{show(clause)} is a guarantee; from names clauses")
        elif family is None:
            premises = [c for c, f in names.clauses.items() if f in _PREMISE_FAMILIES]
            ck.report(where, f"unknown clause {show(clause)}{did_you_mean(clause, premises)}")
        elif family not in _PREMISE_FAMILIES:
            ck.report(where, f"{show(clause)} is an {family} clause, which cannot be a premise")
        seen.add(clause)
    families = {names.clauses.get(c) for c in ids}
    if families <= set(_PREMISE_FAMILIES) and not families & {"numerical", "statistical"}:
        ck.report(key, "must name at least one numerical or statistical clause")
    return ids


def _assumptions(ck: Checker, value, key: str) -> tuple[str, ...] | None:
    return ck.each(value, key, lambda v, k: ck.choice(v, k, ASSUMPTIONS))
