"""Tightness: every witness is a valid instance, and token-level witnesses attain their bound."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from kernel_contracts.bounds import LEMMAS, measure
from kernel_contracts.bounds.sequence import best_iid_witness

GRID = [(0.001, 1.0), (0.02, 1.0), (0.1, 0.5), (1.0, 1.0), (3.0, 0.7), (0.5, 0.05), (8.0, 20.0)]

ATTAINED = [
    "token_log_ratio",
    "token_tv_tanh",
    "reward_drift_tv",
    "pg_bias_plain",
    "pg_bias_tis",
    "pg_bias_mis",
    "clip_budget",
]


def _args(name: str, osc: float, T: float) -> tuple:
    extra = {
        "reward_drift_tv": (1.0,),
        "pg_bias_plain": (5.0, 1.0),
        "pg_bias_tis": (1.2,),
        "pg_bias_mis": (1.2,),
        "clip_budget": (0.2,),
    }
    return (osc, T, *extra.get(name, ()))


@pytest.mark.parametrize("name", ATTAINED)
@pytest.mark.parametrize(("osc", "T"), GRID)
def test_token_level_witness_attains_bound(name, osc, T):
    w = LEMMAS[name].witness(*_args(name, osc, T))
    if w.bound == 0.0:  # e.g. TIS/MIS below the cap: the bound is exactly 0, and so is the bias
        assert w.achieved == 0.0
        return
    assert w.ratio >= 0.999, (name, osc, T, w.achieved, w.bound)
    assert w.ratio <= 1 + 1e-9  # a witness above its bound would be a soundness failure


@pytest.mark.parametrize("r", [1e-4, 0.01, 0.3, 2.0, 10.0])
def test_ratio_witnesses_attain(r):
    for name in ("ratio_to_tv", "ratio_to_kl"):
        w = LEMMAS[name].witness(r)
        assert 0.999 <= w.ratio <= 1 + 1e-9, name


@pytest.mark.parametrize("s", [0.125, 0.5, 2.0, 10.0, 60.0])
def test_kl_exact_form_attained_above_switch(s):
    w = LEMMAS["token_kl_exact"].witness(s, 1.0)
    assert 0.999 <= w.ratio <= 1 + 1e-9


@pytest.mark.parametrize("s", [1e-4, 1e-2, 0.1])
def test_kl_first_order_tight_below_switch(s):
    for name in ("token_kl_exact", "token_kl_hoeffding"):
        w = LEMMAS[name].witness(s, 1.0)
        assert 1 - s * s / 24 - 1e-9 <= w.ratio <= 1 + 1e-9, name


def test_kl_witness_matches_mpmath():
    """The two-point KL at the optimal weight, recomputed at 50 digits, equals the bound."""
    s = 1.5
    with mpmath.workdps(50):
        S = mpmath.mpf(s)
        p = 1 / S - 1 / mpmath.expm1(S)
        kl = mpmath.log(1 - p + p * mpmath.exp(S)) - p * S
        exact = mpmath.log(mpmath.expm1(S) / S) - 1 + S / mpmath.expm1(S)
        assert abs(kl - exact) < mpmath.mpf(10) ** -40
    assert float(kl) == pytest.approx(LEMMAS["token_kl_exact"].evaluate(osc=s, T=1.0), rel=1e-13)


@pytest.mark.parametrize(("eps", "L"), [(1e-3, 1), (0.01, 16), (0.2, 256), (0.5, 4096)])
def test_coupling_attained_for_tv_premise(eps, L):
    w = LEMMAS["sequence_tv_coupling"].witness(eps, L)
    assert w.ratio == pytest.approx(1.0, rel=1e-12)


def test_binomial_tv_matches_mpmath():
    p, pp, L = 0.3, 0.31, 40
    with mpmath.workdps(40):
        exact = (
            sum(
                abs(
                    mpmath.binomial(L, k)
                    * (
                        mpmath.mpf(p) ** k * (1 - mpmath.mpf(p)) ** (L - k)
                        - mpmath.mpf(pp) ** k * (1 - mpmath.mpf(pp)) ** (L - k)
                    )
                )
                for k in range(L + 1)
            )
            / 2
        )
    assert measure.binomial_sequence_tv(p, pp, L) == pytest.approx(float(exact), rel=1e-11)


@pytest.mark.parametrize("L", [1, 16, 256, 4096])
@pytest.mark.parametrize("delta", [0.001, 0.01, 0.1])
def test_sequence_witness_below_every_route(L, delta):
    """The i.i.d. witness never exceeds any route (a soundness check at large L)."""
    best = math.inf
    for name in ("sequence_tv_pinsker", "sequence_tv_bretagnolle_huber", "sequence_tv_ratio"):
        w = LEMMAS[name].witness(2 * delta, 1.0, L)
        assert w.ratio <= 1 + 1e-9, name
        best = min(best, w.bound)
    s = 2 * delta
    coupling = 1 - (1 - math.tanh(s / 4)) ** L
    _, achieved = best_iid_witness(s, L)
    assert achieved <= min(best, coupling) * (1 + 1e-9)
    if L == 1:  # one step: the sequence law is the token law, and the bound is attained
        assert achieved / min(best, coupling) >= 0.999


@pytest.mark.parametrize("s", [1e-3, 0.1, 1.0, 5.0])
@pytest.mark.parametrize("L", [2, 16, 256, 4096])
def test_sequence_ratio_route_never_beats_coupling(s, L):
    coupling = 1 - (1 - math.tanh(s / 4)) ** L
    assert coupling <= math.tanh(L * s / 4) * (1 + 1e-12) <= math.tanh(L * s / 2) * (1 + 1e-12)


def test_looser_forms_are_looser():
    for s in np.linspace(0, 5, 51):
        tight = math.tanh(s / 4)
        assert tight <= s / 4 + 1e-15 <= math.expm1(s) / 2 + 2e-15


def test_every_witness_takes_its_values_by_the_symbols_names():
    """A witness is called with the bound's values by name (the notebooks pass a table of
    them): every parameter without a default is the name of a shared symbol."""
    import inspect

    from kernel_contracts.bounds import SYMBOLS

    for name, lemma in LEMMAS.items():
        if lemma.witness is None:
            continue
        params = inspect.signature(lemma.witness).parameters.values()
        required = {p.name for p in params if p.default is inspect.Parameter.empty}
        assert required <= set(SYMBOLS), (name, sorted(required - set(SYMBOLS)))
