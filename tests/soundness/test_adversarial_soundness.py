"""Adversarial soundness: contracts a user could write, each verdict against the truth.

The true suprema are computed here with mpmath at 50 digits from their closed forms, and the
closed forms themselves are checked against two-point laws (which are extremal for these
tilt problems). A false ``proved`` or a false ``refuted`` fails a test.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from fractions import Fraction
from types import MappingProxyType

import mpmath
import numpy as np
import pytest
import sympy

from kernel_contracts import bounds
from kernel_contracts.bounds import measure
from kernel_contracts.contracts import load, loads
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.check.recheck import check_data
from kernel_contracts.verify.proving.obligations import discharge
from kernel_contracts.verify.proving.render.report import dumps, report_json
from kernel_contracts.verify.proving.runner import run
from kernel_contracts.verify.proving.solve.budget import Budget

mpmath.mp.dps = 50
_HEAD = """contract: 1
name: adversarial
policy: {{temperature: {T}, vocab_size: 32000, max_new_tokens: 512}}
kernels: {{train: {{preset: fp32}}, inference: {{preset: h100-fp8}}}}
"""


def _contract(T: str, clauses: str, guarantee: str) -> str:
    return _HEAD.format(T=T) + clauses + "guarantees:\n  - {id: G, " + guarantee + ", from: [N1]}\n"


def _drift(d: str) -> str:
    return f"numerical:\n  - {{id: N1, metric: logit_drift, max: {d}}}\n"


def _verdict(text: str, rlimit: int | None = None):
    """The verdict of the one guarantee of ``text``, within ``rlimit`` z3 resource units (the
    default budget when ``None``)."""
    (d,) = bounds.derive(loads(text))
    return discharge(d, budget=None if rlimit is None else Budget(rlimit=rlimit))


def _exact(x: float) -> mpmath.mpf:
    f = Fraction(x)
    return mpmath.mpf(f.numerator) / f.denominator


def _K(x: mpmath.mpf) -> mpmath.mpf:
    """Exact sup of KL over laws whose log-ratio spans s: the best two-point law."""
    return mpmath.log(mpmath.expm1(x) / x) - 1 + x / mpmath.expm1(x)


def _two_point_kl_sup(s: mpmath.mpf) -> mpmath.mpf:
    def neg(q):  # KL(π'‖π) for π' = (q, 1 − q) tilted by e^s on token 0
        return -(mpmath.log(1 - q + q * mpmath.e**s) - s * q)

    q0 = (mpmath.expm1(s) / s - 1) / mpmath.expm1(s)
    return -min(neg(q0 + h) for h in (-1e-6, 0, 1e-6))


def _assert_sound(status: Status, threshold: float, truth: mpmath.mpf) -> None:
    holds = _exact(threshold) >= truth
    if holds:
        assert status is not Status.REFUTED, f"false refuted: max {threshold!r} ≥ sup {truth}"
    else:
        assert status is not Status.PROVED, f"false proved: max {threshold!r} < sup {truth}"


# ---- edges of the exact suprema, many digits, extreme parameters ------------------------------
def _tv(s):
    return mpmath.tanh(s / 4)


def _clip(s):
    return mpmath.expm1(s) / mpmath.mpf("0.2")


def _tis(s):
    c = mpmath.mpf("1.5")
    e = mpmath.e**s
    return max(mpmath.sqrt(e) - mpmath.sqrt(c), 0) ** 2 / max(e - 1, c - 1)


def _mis(s):
    c = mpmath.mpf("1.5")
    e = mpmath.e**s
    return max(e - c, 0) / max(e - 1, c - 1)


_SHORT = 100_000  # z3 resource units where the verdict is expected undecided

_QUANTITIES = {
    "tv": ("quantity: token_tv", _tv),
    "log_ratio": ("quantity: token_log_ratio", lambda s: s),
    "clip": ("quantity: clip_budget, clip_epsilon: 0.2", _clip),
    "tis": ("quantity: pg_bias, score_norm: 1, advantage: 1, estimator: tis, cap: 1.5", _tis),
    "mis": ("quantity: pg_bias, score_norm: 1, advantage: 1, estimator: mis, cap: 1.5", _mis),
}


@pytest.mark.parametrize("name", sorted(_QUANTITIES))
@pytest.mark.parametrize(("T", "d"), [("1.0", "0.3"), ("0.01", "0.02"), ("1.0e6", "3.0")])
@pytest.mark.parametrize("rel", [1e-9, -1e-9])
def test_edge_of_the_supremum(name, T, d, rel):
    g, sup = _QUANTITIES[name]
    truth = sup(2 * mpmath.mpf(d) / mpmath.mpf(T))
    if truth == 0:
        pytest.skip("the supremum is 0 here: no threshold below it")
    threshold = float(truth * (1 + rel))
    # TIS at 1e-9 of its edge: z3 spends its budget (unknown); a small one keeps it short
    decided = T != "1.0e6" and name != "tis"
    o = _verdict(_contract(T, _drift(d), f"{g}, max: {threshold!r}"), None if decided else _SHORT)
    _assert_sound(o.status, threshold, truth)
    if decided:  # moderate tilts: the verdict must also be decided
        assert o.status is (Status.PROVED if rel > 0 else Status.REFUTED), o.reason


# ---- token KL below the switch: s²/8 lies above the exact supremum K(s) -----------------------
def test_kl_formula_is_the_two_point_supremum():
    for s in ("0.04", "0.1", "0.4", "3"):
        s = mpmath.mpf(s)
        assert abs(_K(s) - _two_point_kl_sup(s)) < mpmath.mpf(10) ** -20
        assert _K(s) < s**2 / 8


def test_kl_between_the_supremum_and_hoeffding_is_not_refuted():
    # δ = 0.02, T = 1: s = 0.04, sup KL = K(0.04) = 0.000199995556 < 0.000199997 < s²/8
    threshold = 0.000199997
    truth = _K(mpmath.mpf("0.04"))
    assert truth < _exact(threshold) < mpmath.mpf("0.0002")
    o = _verdict(_contract("1.0", _drift("0.02"), f"quantity: token_kl, max: {threshold}"))
    assert o.status is Status.UNKNOWN and "not attained" in o.reason
    assert o.counterexample is None


@pytest.mark.parametrize("rel", [1e-3, -1e-3, 1e-7, -1e-7])
def test_kl_above_the_switch(rel):
    # δ = 0.1, T = 0.5: s = 0.4 ≥ 1/8, where the bound is the exact supremum K(s)
    truth = _K(mpmath.mpf("0.4"))
    threshold = float(truth * (1 + rel))
    text = _contract("0.5", _drift("0.1"), f"quantity: token_kl, max: {threshold!r}")
    o = _verdict(text, _SHORT)
    # z3 spends its budget on the K(s) branch even at 1e-3 of the edge (unknown): soundness only
    _assert_sound(o.status, threshold, truth)


# ---- MIS from a log-ratio clause with e^r ≤ c: no token is masked, the bias is 0 --------------
def test_mis_ratio_below_the_cap_is_not_refuted():
    text = _HEAD.format(T="1.0") + (
        "numerical:\n  - {id: N1, metric: log_ratio, max: 0.3}\n"
        "guarantees:\n  - {id: G, quantity: pg_bias, score_norm: 1, advantage: 1, "
        "estimator: mis, cap: 1.5, max: 0.01, from: [N1]}\n"
    )
    assert mpmath.e ** mpmath.mpf("0.3") < mpmath.mpf("1.5")  # w ≤ e^r ≤ c on every token
    assert _verdict(text).status is not Status.REFUTED


# ---- sequence TV through Pinsker: a bound, not the supremum ------------------------------------
def test_sequence_tv_above_the_iid_witness_is_not_refuted():
    # Pinsker gives 0.2263 at δ = 0.02, L = 512; the guarantee's truth is unknown below it
    o = _verdict(_contract("1.0", _drift("0.02"), "quantity: sequence_tv, max: 0.2"))
    assert o.route == "sequence_tv_pinsker"
    assert o.status is Status.UNKNOWN


# ---- statistical log-ratio premises are about the sampled token ------------------------------
_SAMPLED = _HEAD.format(T="1.0") + (
    "statistical:\n  - {id: N1, metric: abs_log_ratio, statistic: exceed_rate, threshold: 0.5, "
    "max: 0.01, confidence: 0.95, min_samples: 1000, slices: [all]}\n"
    "guarantees:\n  - {id: G, quantity: token_tv, max: MAX, from: [N1]}\n"
)


def test_sampled_log_ratio_premise_does_not_prove_a_false_tv():
    # every position: π' = (0.99, 0.01), w = e^{-0.5} on the likely token. A sampled token
    # exceeds |log w| > 0.5 with probability 0.01 ≤ ρ, yet TV = 0.99·(1 − e^{-0.5}) = 0.3895
    eta, r = 0.01, 0.5
    zp = np.log(np.array([1 - eta, eta]))
    z = np.log(np.array([(1 - eta) * np.exp(-r), 1 - (1 - eta) * np.exp(-r)]))
    log_w = measure.log_ratio(z, zp, 1.0)
    p_exceed = float(np.sum(np.exp(zp)[np.abs(log_w) > r + 1e-12]))
    tv = measure.tv(z, zp, 1.0)
    assert p_exceed <= 0.01 + 1e-12 and tv > 0.389
    assert _verdict(_SAMPLED.replace("MAX", "0.3")).status is Status.REFUTED
    # the supremum is (1 − ρ)(1 − e^{-r}) + ρ = 0.399535: just above it holds
    assert _verdict(_SAMPLED.replace("MAX", "0.3996")).status is Status.PROVED


# ---- extreme temperature: a verdict with a reason, a report JSON can hold ----------------------
def test_tiny_temperature_gives_unknown_not_a_crash():
    text = _contract("1.0e-6", _drift("0.02"), "quantity: token_tv, max: 0.99")
    report = run(loads(text, "tiny-t.yaml"))
    (o,) = report.obligations
    assert o.status is not Status.PROVED  # tanh(10^4) > 0.99
    json.loads(dumps(report))  # no inf in the report
    assert report_json(report)["obligations"][0]["status"] in ("unknown", "refuted")


# ---- check: an internally consistent report of a weaker statement ------------------------------
def _forged(tmp_path, change, monkeypatch) -> tuple[str, ...]:
    src = "contracts/examples/refuted-on-purpose.yaml"
    path = tmp_path / "refuted-on-purpose.yaml"
    shutil.copy(src, path)
    contract = load(str(path))
    data = json.loads(dumps(run(contract)))
    assert check_data(data, report_dir=str(tmp_path)).ok
    d = change(bounds.derive(contract)[0])
    forged = json.loads(json.dumps(_obligation(d)))
    assert forged["status"] == "proved"  # the weaker statement is provable
    data["obligations"][0] = forged
    data["status"], data["exit_code"] = "proved", 0
    result = check_data(data, report_dir=str(tmp_path))
    assert not result.ok
    # the same differences without the contract file, from another working directory
    path.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = check_data(data, report_dir=str(elsewhere))
    assert again.differences == result.differences
    return again.differences


def _obligation(d):
    from kernel_contracts.verify.proving.obligations import obligation_json

    return obligation_json(discharge(d))


def test_check_rejects_a_forged_temperature(tmp_path, monkeypatch):
    diffs = _forged(
        tmp_path,
        lambda d: dataclasses.replace(
            d, constants=MappingProxyType({**d.constants, "T": Fraction(2)})
        ),
        monkeypatch,
    )
    assert any("constants.T" in x for x in diffs), diffs


def test_check_rejects_a_forged_formula(tmp_path, monkeypatch):
    delta, T = sympy.Symbol("delta_N1", nonnegative=True), sympy.Symbol("T", positive=True)
    diffs = _forged(
        tmp_path, lambda d: dataclasses.replace(d, expr=sympy.tanh(delta / (4 * T))), monkeypatch
    )
    assert any("symbolic.srepr" in x for x in diffs), diffs


# ---- a TV clause above 1 says nothing more than TV ≤ 1 -----------------------------------------
@pytest.mark.parametrize(
    ("clause", "guarantee", "expected"),
    [
        ("numerical:\n  - {id: N1, metric: tv, max: 5}\n", "quantity: token_tv, max: 2", "proved"),
        (
            "numerical:\n  - {id: N1, metric: tv, max: 5}\n",
            "quantity: pg_bias, score_norm: 1, advantage: 1, estimator: plain, max: 3",
            "proved",  # 2·G·A·TV ≤ 2
        ),
        (
            "numerical:\n  - {id: N1, metric: tv, max: 5}\n",
            "quantity: pg_bias, score_norm: 1, advantage: 1, estimator: plain, max: 1.9",
            "refuted",  # two tokens that swap their mass: 2·TV → 2
        ),
        (
            "statistical:\n  - {id: N1, metric: tv, statistic: mean, max: 5, confidence: 0.9, "
            "min_samples: 10, slices: [all]}\n",
            "quantity: token_tv, max: 2",
            "proved",
        ),
    ],
)
def test_tv_clause_above_one(clause, guarantee, expected):
    assert _verdict(_contract("1.0", clause, guarantee)).status.label == expected


def test_check_rejects_a_premise_frozen_as_a_constant(tmp_path, monkeypatch):
    # the drift variable dropped from the box and fixed at 0.01: "proved", consistently re-run
    diffs = _forged(
        tmp_path,
        lambda d: dataclasses.replace(
            d,
            variables=(),
            constants=MappingProxyType({**d.constants, "delta_N1": Fraction(1, 100)}),
        ),
        monkeypatch,
    )
    assert any("constants.delta_N1" in x for x in diffs), diffs


@pytest.mark.parametrize(
    ("premise", "horizon", "rel", "expected"),
    [
        (_drift("0.02"), 1, 1 + 1e-4, Status.PROVED),
        (_drift("0.02"), 1, 1 - 1e-4, Status.REFUTED),
        ("numerical:\n  - {id: N1, metric: tv, max: 0.01}\n", 3, 1 + 1e-4, Status.PROVED),
    ],
)
def test_coupling_route_with_an_integer_horizon_is_decided(premise, horizon, rel, expected):
    """The coupling route 1 − (1 − ε)^L has the horizon L as its exponent. It wins at L = 1,
    where it is the attained token TV, and whenever only a TV clause is given."""
    eps = mpmath.tanh(mpmath.mpf("0.01")) if "logit_drift" in premise else mpmath.mpf("0.01")
    true = 1 - (1 - eps) ** horizon
    guarantee = (
        f"quantity: sequence_tv, scope: sequence, horizon: {horizon}, max: {float(true * rel)!r}"
    )
    (d,) = bounds.derive(loads(_contract("1.0", premise, guarantee)))
    assert d.route == "sequence_tv_coupling"
    assert discharge(d).status is expected
