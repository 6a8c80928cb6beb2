"""VESPO's gamma weight on the rollout (vespo, ω = φ(W) = e^λ·W^k·e^{−λW} per sequence): the
ratio form meets the one-token witness to first order and stays above i.i.d. sequences; no
two-point law of W (the worst laws of a mean-1 ratio), random logit pair (hypothesis) or exact
rational sequence law beats a form; the cap holds past TRL's clamps; the DSL reads the
estimator; its obligations prove above the form and, every route being a bound, answer unknown
(never refuted) just below it."""

from __future__ import annotations

import math
import pathlib
import re
from fractions import Fraction
from itertools import product

import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds, contracts
from kernel_contracts.bounds import LEMMAS, measure
from kernel_contracts.bounds.pg.vespo import (
    CLAMP_FREE,
    peak_above,
    vespo_cap,
    vespo_discrepancy,
    vespo_ratio,
)
from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.kernels.rl import numpy_weights
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from tests.support import strategies
from tests.support.pg_contracts import head, pg_contract
from tests.support.strategies import examples, within

GAMMAS = [(2.0, 3.0, 3.0, 2.0), (1.0, 1.0, 5.0, 0.5), (0.5, 4.0, 2.0, 1e-5)]


def _pairs(gamma):
    g = [sympy.Float(x, 30) for x in gamma]
    floor = sympy.Float(1e-4, 30)
    return ((g[0], sympy.Max(g[1], floor)), (g[2], sympy.Max(g[3], floor)))


def ratio_form(R: float, gamma) -> float:
    return float(vespo_ratio(sympy.Float(R, 30), _pairs(gamma)))


def cap_form(gamma) -> float:
    return float(vespo_cap(_pairs(gamma)))


def _mp(x) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator if isinstance(x, Fraction) else mpmath.mpf(x)


def _worst(W, gamma):
    """max over the pairs of |φ(W) − W| at the working precision (W an mpf or a Fraction)."""
    W = _mp(W)
    out = mpmath.mpf(0)
    for k, lam in ((gamma[0], gamma[1]), (gamma[2], gamma[3])):
        lam = max(lam, 1e-4)
        out = max(out, abs(mpmath.exp(lam + k * mpmath.log(W) - lam * W) - W))
    return out


def _worst64(W, gamma):
    """The same in float64, for arrays."""
    out = np.zeros_like(W)
    for k, lam in ((gamma[0], gamma[1]), (gamma[2], gamma[3])):
        lam = max(lam, 1e-4)
        out = np.maximum(out, np.abs(np.exp(lam + k * np.log(W) - lam * W) - W))
    return out


# ---- the forms and the witnesses -----------------------------------------------------------
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("r", [1e-4, 1e-2, 0.3, 2.0])
def test_one_token_witness_stays_below_and_meets_the_form_to_first_order(r, gamma):
    w = LEMMAS["pg_bias_vespo"].witness(r=r, L=1, k_pos=gamma[0], lam_pos=gamma[1],
                                        k_neg=gamma[2], lam_neg=gamma[3])  # fmt: skip
    assert w.achieved <= w.bound * (1 + 1e-12)
    if r <= 1e-4:  # |k − 1 − λ|·r to first order, k − 1 − λ ≠ 0 for every pair here
        assert w.ratio > 0.999


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize(("r", "L"), [(1e-3, 8), (0.05, 16), (0.5, 30)])
def test_iid_sequences_stay_below_the_form(r, L, gamma):
    w = LEMMAS["pg_bias_vespo"].witness(r=r, L=L, k_pos=gamma[0], lam_pos=gamma[1],
                                        k_neg=gamma[2], lam_neg=gamma[3])  # fmt: skip
    assert 0 < w.achieved <= w.bound * (1 + 1e-12)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_cap_witness_stays_below_the_cap(gamma):
    w = LEMMAS["pg_bias_vespo_cap"].witness(L=1, k_pos=gamma[0], lam_pos=gamma[1],
                                            k_neg=gamma[2], lam_neg=gamma[3])  # fmt: skip
    assert 0 < w.achieved <= w.bound and w.bound == pytest.approx(cap_form(gamma), rel=1e-12)


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("R", [1e-3, 0.1, 1.0, 4.0, CLAMP_FREE])
def test_no_two_point_law_of_w_beats_the_ratio_form(R, gamma):
    """The largest E|φ(W) − W| over laws on [e^−R, e^R] with mean 1 is over two-point laws
    {a ≤ 1 ≤ b}; a 120 × 120 grid of them, each end also at the range's ends."""
    a = np.exp(-R * np.linspace(0, 1, 400))[:, None]
    b = np.exp(R * np.linspace(0, 1, 400))[None, :]
    gap = np.where(b - a > 0, b - a, 1.0)
    q = np.where(b - a > 0, (b - 1) / gap, 1.0)  # π'-mass on a
    best = np.max(q * _worst64(a, gamma) + (1 - q) * _worst64(b, gamma))
    assert best <= ratio_form(R, gamma) * (1 + 1e-9)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_the_cap_holds_for_any_law_and_past_the_clamps(gamma):
    """Two-point laws with W up to e^60 and down to e^−60, ω from the weight rule itself
    (TRL's clamps of log w to [log 1e−8, 20]): E|ω − W| ≤ 1 + M."""
    cap = cap_form(gamma)
    for lo, hi in product([1e-26, 1e-9, 0.3, 1.0], [1.0, 2.0, 1e9, 1e26]):
        if hi == lo:
            continue
        q = (hi - 1) / (hi - lo)
        lr = np.array([[math.log(lo)], [math.log(hi)]])
        for adv in (1.0, -1.0):
            omega = numpy_weights("vespo", lr, np.ones_like(lr), np.full_like(lr, adv),
                                  params={"gamma": gamma})  # fmt: skip
            d = q * abs(omega[0, 0] - lo) + (1 - q) * abs(omega[1, 0] - hi)
            assert d <= cap * (1 + 1e-9)


def test_peak_above_is_above_the_peak():
    for k, lam in [
        (Fraction(2), Fraction(3)),
        (Fraction(5), Fraction(1, 2)),
        (Fraction(1, 3), Fraction(1, 10**4)),
    ]:
        exact_peak = mpmath.exp(_mp(lam - k)) * (_mp(k) / _mp(lam)) ** _mp(k)
        assert exact_peak <= _mp(peak_above(k, lam)) <= exact_peak * (1 + 1e-9) + 1e-12


# ---- property tests ------------------------------------------------------------------------
GAMMA = st.tuples(*(st.floats(0.05, 6.0) for _ in range(4)))


def _logit_pairs():
    return strategies.logit_pairs(
        [2, 3, 5, 17, 300],
        ([0.05, 0.5, 1.0, 3.0], (0.05, 10.0)),
        ([0.0, 1e-4, 0.02, 0.1, 0.5, 2.0, 10.0], (0, 10)),
    ).map(lambda case: case[:3])


@examples(150)
@given(_logit_pairs(), GAMMA)
def test_random_logit_pairs_never_beat_the_forms(case, gamma):
    """One-token sequences (W = w): R = the pair's largest |log w| and its drift's range."""
    z, zp, T = case
    d = zp - z
    err = 8 * np.finfo(np.float64).eps * (np.max(np.abs(z)) + np.max(np.abs(zp)) + 10) / T
    s = float(np.max(d) - np.min(d)) / T + err
    r = measure.max_abs_log_ratio(z, zp, T) + err
    got = vespo_discrepancy(z, zp, T, gamma)
    assert within(got, cap_form(gamma))
    for R in (r, s):
        if R <= CLAMP_FREE:
            assert within(got, ratio_form(R, gamma))


@examples(120)
@given(
    st.lists(st.lists(st.integers(1, 30), min_size=2, max_size=3), min_size=4, max_size=4),
    st.lists(st.lists(st.integers(1, 30), min_size=2, max_size=3), min_size=4, max_size=4),
    GAMMA,
)
def test_exact_rational_sequence_laws_never_beat_the_forms(p_rows, q_rows, gamma):
    """Two-token sequences over a 2-or-3-token vocabulary: π and π' with rational masses per
    prefix (row 0 the first token's law, row 1 + y the second's after y; rows past the vocabulary
    unused), W exact rationals,
    D = Σ π'(y)·max_pairs |φ(W) − W| at 40 digits, against the ratio form at R = 2·max|log w|
    and the cap."""
    n = min(
        len(p_rows[0]), len(q_rows[0]), *(len(x) for x in p_rows[1:]), *(len(x) for x in q_rows[1:])
    )
    p = [[Fraction(v, sum(row[:n])) for v in row[:n]] for row in p_rows]
    q = [[Fraction(v, sum(row[:n])) for v in row[:n]] for row in q_rows]
    d, r = mpmath.mpf(0), 0.0
    with mpmath.workdps(40):
        for y1, y2 in product(range(n), range(n)):
            w1, w2 = p[0][y1] / q[0][y1], p[1 + y1][y2] / q[1 + y1][y2]
            r = max(r, abs(math.log(w1)), abs(math.log(w2)))
            d += _mp(q[0][y1] * q[1 + y1][y2]) * _worst(w1 * w2, gamma)
    assert float(d) <= cap_form(gamma) * (1 + 1e-12)
    if 2 * r <= CLAMP_FREE:
        assert float(d) <= ratio_form(2 * r * (1 + 1e-12), gamma) * (1 + 1e-12)


# ---- the DSL, derivations and obligations --------------------------------------------------
def test_the_dsl_reads_vespo_and_derives_per_sequence_forms():
    c = pg_contract(
        ["estimator: vespo, gamma: [2, 3, 3, 2], max: 1000, from: [N1]",
         "estimator: vespo, gamma: [2, 3, 3, 2], max: 1000, from: [N3]",
         "estimator: vespo, gamma: [2, 3, 3, 2], max: 1000, from: [N2]"],
        delta="0.01", name="vespo", tv="0.1", L=4,
    )  # fmt: skip
    assert c.guarantee("G0").gamma == (2, 3, 3, 2)
    drift, ratio, tv = bounds.derive(c)
    assert drift.chain[-1] == "pg_bias_vespo" and not drift.extra["attained"]
    assert drift.value == pytest.approx(5 * 4 * ratio_form(4 * 0.02, (2, 3, 3, 2)), rel=1e-9)
    assert ratio.chain[-1] == "pg_bias_vespo" and not ratio.extra["attained"]
    assert ratio.value == pytest.approx(5 * 4 * ratio_form(4 * 0.6, (2, 3, 3, 2)), rel=1e-9)
    assert tv.chain[-1] == "pg_bias_vespo_cap" and not tv.extra["attained"]
    assert tv.value == pytest.approx(5 * 4 * cap_form((2, 3, 3, 2)), rel=1e-9)


def test_past_the_clamp_free_range_only_the_cap_is_used():
    (d,) = bounds.derive(pg_contract(["estimator: vespo, gamma: [2, 3, 3, 2], max: 1000, "
                                      "from: [N3]"], name="v", L=40))  # fmt: skip
    assert d.chain[-1] == "pg_bias_vespo_cap"  # 40 × 0.6 = 24 > log 1e8
    assert d.value == pytest.approx(5 * 40 * cap_form((2, 3, 3, 2)), rel=1e-9)


# the drift route's form below its value costs z3 its whole budget before "unknown" (≈ 40 s)
@pytest.mark.parametrize("premise", [pytest.param("N1", marks=pytest.mark.slow), "N3", "N2"])
def test_obligations_prove_above_the_form_and_never_refute_below(premise):
    line = "estimator: vespo, gamma: [2, 3, 3, 2], max: {}, from: [" + premise + "]"
    (d,) = bounds.derive(pg_contract([line.format(1000)], name="c", tv="0.1", L=4))
    lines = [line.format(repr(d.value * f)) for f in (1.2, 0.999)]
    proved, below = (discharge(x) for x in bounds.derive(pg_contract(lines, name="c", tv="0.1",
                                                                       L=4)))  # fmt: skip
    assert proved.status is Status.PROVED, proved.reason
    assert below.status is Status.UNKNOWN, below.reason
    assert "not attained" in below.reason


@pytest.mark.parametrize(
    ("guarantee", "message"),
    [
        ("estimator: vespo", "needs gamma"),
        ("estimator: vespo, gamma: [0, 3, 3, 2]", "must be > 0"),
        ("estimator: vespo, gamma: [2, 3]", "of 4 numbers, got 2 items"),
        ("estimator: vespo, gamma: 2", "a list [k_pos, lambda_pos, k_neg, lambda_neg]"),
        ("estimator: tis, cap: 2, gamma: [2, 3, 3, 2]", "applies only to estimator vespo"),
    ],
)
def test_bad_parameters_are_refused_with_their_key(guarantee, message):
    with pytest.raises(KernelContractsError) as err:
        pg_contract([f"{guarantee}, max: 1, from: [N1]"], name="vespo")
    text = str(err.value)
    assert message in text and "guarantees[0]." in text, text


def test_the_rl_page_vespo_guarantee_is_read_and_proved():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md").read_text("utf-8")
    section = page[page.index("## VESPO's gamma weight") :]
    block = re.search(r"```yaml\n(guarantees:\n.*?)```", section, re.S).group(1)
    c = contracts.loads(head(name="vespo").replace("guarantees:\n", "") + block, path="rl.md")
    assert [g.estimator for g in c.guarantees] == ["vespo"]
    (d,) = bounds.derive(c)
    assert discharge(d).status is Status.PROVED, d.guarantee
