"""SAPO's soft gate on the rollout (sapo, ω = w·sech²(τ(w − 1)/2)): every form is a bound,
met to first order by the ratio witness; the witnesses stay below their forms; no two-point
law, random logit pair (hypothesis) or exact rational law beats a form; the DSL reads the
estimator; its obligations prove above the form and, every route being a bound, answer
unknown (never refuted) just below it.

Measured tightness (witness/bound, t = 1.05): see docs/rl.md (numbers from the witnesses at
the lemmas' grid points).
"""

from __future__ import annotations

import math
import pathlib
import re
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds, contracts
from kernel_contracts.bounds import LEMMAS, measure
from kernel_contracts.bounds.pg.sapo import (
    sapo_discrepancy,
    sapo_drift_sup,
    sapo_ratio,
    sapo_ratio_best,
    sapo_tv,
)
from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from tests.support import strategies
from tests.support.pg_contracts import head, pg_contract
from tests.support.strategies import examples, within

TEMPS = [0.1, 1.0, 1.05, 5.0, 20.0]


def ratio_form(r: float, t: float) -> float:
    return float(sapo_ratio(sympy.Float(r, 30), sympy.Float(t, 30)))


def tv_form(e: float, t: float) -> float:
    return float(sapo_tv(sympy.Float(e, 30), sympy.Float(t, 30)))


def _h(w, t):
    return mpmath.tanh(t * (w - 1) / 2) ** 2


# ---- the supremum, the forms and the witnesses --------------------------------------------
@pytest.mark.parametrize("t", TEMPS)
@pytest.mark.parametrize("r", [1e-3, 0.2, 0.9, 3.0])
def test_ratio_witness_stays_below_the_form_and_meets_it_to_first_order(r, t):
    w = LEMMAS["pg_bias_sapo_ratio"].witness(r=r, tau_gate=t)
    best, _, _ = sapo_ratio_best(r, t)
    assert w.achieved == pytest.approx(best, rel=1e-9, abs=1e-300)
    assert w.achieved <= w.bound * (1 + 1e-12)
    x = mpmath.exp(r)  # the two-point law on e^{±r}, at 30 digits, by its own formula
    ends = (1 / (1 + x)) * x * _h(x, t) + (x / (1 + x)) * (1 / x) * _h(1 / x, t)
    assert w.achieved >= float(ends) * (1 - 1e-12)  # the grid holds the ends
    if r * t <= 0.01:  # tanh u ≤ u, w ≤ e^r and Bhatia–Davis are tight as r·t → 0
        assert w.ratio >= 0.98, w.ratio


def test_the_best_ratio_law_can_lie_inside_the_range():
    """For a large t the concave envelope is reached with b < e^r: the two ends are not the
    supremum (why the ratio form is a bound, not a claimed supremum)."""
    r, t = 0.7, 8.0
    best, _, b = sapo_ratio_best(r, t)
    x = math.exp(r)
    ends = (x * math.tanh(t * (x - 1) / 2) ** 2 + math.tanh(t * (1 / x - 1) / 2) ** 2) / (1 + x)
    assert best > ends + 5e-6 and b < x * (1 - 1e-3)
    assert best <= ratio_form(r, t)


def test_no_law_on_the_ratio_range_beats_the_form():
    """Two-point laws {a ≤ 1 ≤ b} in [e^{−r}, e^r] with mean 1 (two-point laws are the
    extreme points of laws with one moment fixed), on a grid."""
    for r in (0.01, 0.1, 0.7, 2.0, 5.0):
        for t in (0.05, 0.5, 1.05, 8.0, 40.0):
            best, _, _ = sapo_ratio_best(r, t, 301)
            assert within(best, ratio_form(r, t)), (r, t)


@pytest.mark.parametrize("t", TEMPS)
@pytest.mark.parametrize("osc", [0.05, 0.4, 2.0, 6.0])
def test_drift_witness_stays_below_the_form_and_finds_the_grid_best(osc, t):
    w = LEMMAS["pg_bias_sapo"].witness(osc=osc, T=1.0, tau_gate=t)
    assert w.achieved <= w.bound * (1 + 1e-12)
    assert w.bound == pytest.approx(ratio_form(osc, t), rel=1e-12)
    assert bounds.pg_bias_bound("sapo", osc=osc, temperatures=(t, t / 2)) == pytest.approx(
        w.bound, rel=1e-12
    )
    assert bounds.pg_bias_supremum("sapo", osc=osc, temperatures=(t, t)) is None
    e = math.exp(osc)
    q = np.linspace(0.0, 1.0, 4001)
    m = 1 + q * (e - 1)
    d = q * (e / m) * np.tanh(t * (e / m - 1) / 2) ** 2
    d += (1 - q) / m * np.tanh(t * (1 / m - 1) / 2) ** 2
    assert within(float(d.max()), w.bound)
    assert w.achieved >= float(d.max()) * (1 - 1e-6)  # the witness is the grid's best or better
    assert sapo_drift_sup(osc, t)[0] == pytest.approx(w.achieved, rel=1e-9)


def test_drift_gap_is_a_quarter_at_small_drift():
    w = LEMMAS["pg_bias_sapo"].witness(osc=0.01, T=1.0, tau_gate=1.05)
    assert 0.24 <= w.ratio <= 0.26  # the drift's interval of log w is half the ratio form's


@pytest.mark.parametrize("t", TEMPS)
@pytest.mark.parametrize("eps", [1e-3, 0.05, 0.3])
def test_tv_witness_stays_below_the_form(eps, t):
    w = LEMMAS["pg_bias_sapo_tv"].witness(eps=eps, tau_gate=t)
    assert w.achieved <= w.bound * (1 + 1e-12)
    assert w.achieved >= eps * 0.9 * math.tanh(t * 1e3) ** 2  # a leak far out reaches ≈ ε


# ---- soundness -----------------------------------------------------------------------------
def _pairs():
    return strategies.logit_pairs(
        [2, 3, 5, 17, 300],
        ([0.05, 0.5, 1.0, 3.0], (0.05, 10.0)),
        ([0.0, 1e-4, 0.02, 0.1, 0.5, 2.0, 10.0], (0, 10)),
    ).map(lambda case: case[:3])


TEMP = st.sampled_from([0.1, 1.0, 1.05, 5.0, 40.0]) | st.floats(0.01, 50)


@examples(150)
@given(_pairs(), TEMP)
def test_random_logit_pairs_never_beat_any_form(case, t):
    z, zp, T = case
    d = zp - z
    err = 8 * np.finfo(np.float64).eps * (np.max(np.abs(z)) + np.max(np.abs(zp)) + 10) / T
    s = float(np.max(d) - np.min(d)) / T + err
    r = measure.max_abs_log_ratio(z, zp, T) + err
    got = sapo_discrepancy(z, zp, T, t)
    assert within(got, ratio_form(s, t))
    assert within(got, ratio_form(r, t))
    assert within(got, tv_form(float(measure.tv(z, zp, T)), t))


def _relaxed(p, q, t):
    """Σ π'·w·min(1, t²(w − 1)²/4): the discrepancy with tanh² u raised to min(1, u²), exact."""
    return sum(
        qi * (pi / qi) * min(Fraction(1), t * t * (pi / qi - 1) ** 2 / 4)
        for pi, qi in zip(p, q, strict=True)
    )


@examples(150)
@given(
    st.lists(st.integers(1, 60), min_size=2, max_size=6),
    st.lists(st.integers(1, 60), min_size=2, max_size=6),
    st.fractions(Fraction(1, 100), 40),
)
def test_exact_rational_laws_never_beat_the_ratio_and_tv_forms(a, b, t):
    """π, π' with rational masses; the relaxed discrepancy (above the true one, as
    tanh² u ≤ min(1, u²)) is computed exactly and compared with the forms at e^r = x =
    max(max w, 1/min w), rational too: min(1, t²(x − 1)²/4) and min(1, (1 + t/4)²·TV)."""
    n = min(len(a), len(b))
    p = [Fraction(v, sum(a[:n])) for v in a[:n]]
    q = [Fraction(v, sum(b[:n])) for v in b[:n]]
    w = [pi / qi for pi, qi in zip(p, q, strict=True)]
    d = _relaxed(p, q, t)
    x = max(max(w), 1 / min(w))
    assert d <= min(Fraction(1), t * t * (x - 1) ** 2 / 4)
    tv = sum(abs(pi - qi) for pi, qi in zip(p, q, strict=True)) / 2
    assert d <= min(Fraction(1), (1 + t / 4) ** 2 * tv)


@examples(100)
@given(st.floats(0.0, 0.3), st.floats(0.05, 1.0), TEMP, st.integers(0, 2**32 - 1))
def test_the_exceedance_split_is_sound_on_random_positions(rho, level, t, seed):
    """Mean discrepancy over positions, a ρ-share drifting arbitrarily far past the level."""
    rng = np.random.default_rng(seed)
    exceed = rng.random(40) < rho
    got = []
    for far in exceed:
        z = rng.normal(0, 2, 6)
        delta = rng.uniform(level, level + 20) if far else level * rng.choice([1.0, 0.5])
        zp = z + np.where(rng.random(6) < 0.5, delta, -delta)
        got.append(sapo_discrepancy(z, zp, 1.0, t))
    share = float(np.mean(exceed))
    bound = (1 - share) * ratio_form(2 * level * (1 + 1e-12), t) + share
    assert within(float(np.mean(got)), bound)


# ---- the DSL, derivations and obligations --------------------------------------------------
def test_the_dsl_reads_sapo_and_derives_its_forms_with_the_larger_temperature():
    c = pg_contract(
        ["estimator: sapo, temperatures: [1.0, 1.05], max: 100, from: [N1]",
         "estimator: sapo, temperatures: [2.0, 0.5], max: 100, from: [N3]",
         "estimator: sapo, temperatures: [1.0, 1.05], max: 100, from: [N2]"],
        delta="0.4", name="sapo", tv="0.1",
    )  # fmt: skip
    assert c.guarantee("G0").temperatures == (1.0, 1.05)
    drift, ratio, tv = bounds.derive(c)
    assert drift.chain[-1] == "pg_bias_sapo" and not drift.extra["attained"]
    assert drift.value == pytest.approx(5 * ratio_form(0.8, 1.05), rel=1e-12)
    assert ratio.chain[-1] == "pg_bias_sapo_ratio" and not ratio.extra["attained"]
    assert ratio.value == pytest.approx(5 * ratio_form(0.6, 2.0), rel=1e-12)
    assert tv.chain[-1] == "pg_bias_sapo_tv" and not tv.extra["attained"]
    assert tv.value == pytest.approx(5 * (1 + 1.05 / 4) ** 2 * 0.1, rel=1e-12)


@pytest.mark.parametrize("premise", ["N1", "N3", "N2"])
def test_obligations_prove_above_the_form_and_never_refute_below(premise):
    line = "estimator: sapo, temperatures: [1.0, 1.05], max: {}, from: [" + premise + "]"
    (d,) = bounds.derive(pg_contract([line.format(100)], name="c", tv="0.1"))
    lines = [line.format(repr(d.value * f)) for f in (1.2, 0.999)]
    proved, below = (discharge(x) for x in bounds.derive(pg_contract(lines, name="c", tv="0.1")))
    assert proved.status is Status.PROVED, proved.reason
    assert below.status is Status.UNKNOWN, below.reason
    assert "not attained" in below.reason


@pytest.mark.parametrize(
    ("guarantee", "message"),
    [
        ("estimator: sapo", "needs temperatures"),
        ("estimator: sapo, temperatures: [0, 1.05]", "must be > 0"),
        ("estimator: sapo, temperatures: [1.0]", "a list [tau_pos, tau_neg] of 2 numbers"),
        ("estimator: tis, cap: 2, temperatures: [1, 1]", "applies only to estimator sapo"),
    ],
)
def test_bad_parameters_are_refused_with_their_key(guarantee, message):
    with pytest.raises(KernelContractsError) as err:
        pg_contract([f"{guarantee}, max: 1, from: [N1]"], name="sapo")
    text = str(err.value)
    assert message in text and "guarantees[0]." in text, text


def test_the_rl_page_sapo_guarantee_is_read_and_proved():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md").read_text("utf-8")
    section = page[page.index("## SAPO's soft gate") :]
    block = re.search(r"```yaml\n(guarantees:\n.*?)```", section, re.S).group(1)
    c = contracts.loads(head(name="sapo").replace("guarantees:\n", "") + block, path="rl.md")
    assert [g.estimator for g in c.guarantees] == ["sapo"]
    (d,) = bounds.derive(c)
    assert discharge(d).status is Status.PROVED, d.guarantee


def test_every_framework_refuses_the_export_with_the_reason():
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS, NoCounterpart, Request

    r = Request("G", "sapo")
    reasons = {"verl": "bypass mode", "trl": "trainer's old log-probs",
               "skyrl": "training kernel's", "nemo-rl": "no NeMo-RL mapping"}  # fmt: skip
    for name, why in reasons.items():
        with pytest.raises(NoCounterpart, match=why):
            FRAMEWORKS[name].settings(r)
