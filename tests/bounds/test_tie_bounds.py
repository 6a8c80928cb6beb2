"""The bias bounds hold whatever a tie gets: a token exactly on a threshold (w at a band's end,
at a cap, at 1 ± ε; a TV or a sampled token's probability gap exactly τ) may get ω = w, 0 or
w/2, as the frameworks' codes give it (``kernels.rl.ties``), and E_π'|ω − w| stays below the
bound ``bounds.pg_bias_bound`` derives from the law's own drift, and below the band's
log-ratio and TV forms.

Laws are exact: π' and π are dyadic rationals, tied tokens carry π(y) = t·π'(y) (or
π(y) = π'(y) ± τ) exactly, the advantage's sign is drawn per token (the bound holds for every
sign), and the discrepancy is summed in rationals. Estimators whose thresholds no rational
law meets exactly (KL thresholds, the opsm and k1 bands e^{±δ}) are not drawn here."""

from __future__ import annotations

import functools
from fractions import Fraction

import mpmath
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds
from kernel_contracts.bounds.pg import closed_forms as C
from tests.support.strategies import examples, within

VARIANTS = ("keep", "drop", "half")
BANDS = [(0.5, 2.0), (0.75, 1.25), (0.25, 1.5), (0.0, 1.5), (0.875, 1.125)]
DUALS = [(0.25, 1.5), (0.25, 1.125), (0.125, 3.0), (0.5, 1.25)]
DEN = 2**10  # π' and π of the free tokens are multiples of 1/DEN (then scaled exactly)


def _estimator():
    band = st.sampled_from(BANDS)
    caps = st.sampled_from([0.5, 1.0, 1.25, 2.0, 4.0])
    eps = st.sampled_from([0.125, 0.25, 0.5])
    return st.one_of(
        st.sampled_from([1.25, 1.5, 2.0, 3.0]).map(lambda c: ("mis", {"cap": c})),
        *(
            band.map(lambda b, name=name: (name, {"band": b}))
            for name in ("icepop", "geo_mask", "seq_mask", "seq_outlier")
        ),
        st.tuples(caps, band).map(lambda cb: ("tis_mask", {"cap": cb[0], "band": cb[1]})),
        eps.map(lambda e: ("ppo_clip", {"clip_epsilon": e})),
        st.sampled_from(DUALS).map(lambda ec: ("dual_clip", {"clip_epsilon": ec[0], "cap": ec[1]})),
    )


def _thresholds(name: str, p: dict) -> list[Fraction]:
    """The ratios at which ``name`` with params ``p`` has a tie."""
    if name == "mis":
        return [Fraction(p["cap"])]
    if name in ("ppo_clip", "dual_clip"):
        e = Fraction(p["clip_epsilon"])
        return [1 - e, 1 + e] + ([Fraction(p["cap"])] if name == "dual_clip" else [])
    lo, hi = (Fraction(x) for x in p["band"])
    return [x for x in (lo, hi) if x > 0]


@st.composite
def _law(draw, thresholds: list[Fraction]):
    """(π', π) over 2 to 6 tokens, the first 1 to 3 of them tied at drawn thresholds."""
    tied = draw(st.lists(st.sampled_from(thresholds), min_size=1, max_size=3))
    q = [Fraction(draw(st.integers(1, 64)), DEN) for _ in tied]
    p = [t * x for t, x in zip(tied, q, strict=True)]
    if sum(q) >= 1 or sum(p) >= 1:
        q, p = [x / 4 for x in q], [x / 4 for x in p]
    free = draw(st.integers(1, 3))
    qa = draw(st.lists(st.integers(1, 100), min_size=free, max_size=free))
    pa = draw(st.lists(st.integers(1, 100), min_size=free, max_size=free))
    rest_q, rest_p = 1 - sum(q), 1 - sum(p)
    q += [rest_q * Fraction(a, sum(qa)) for a in qa]
    p += [rest_p * Fraction(a, sum(pa)) for a in pa]
    assert sum(q) == 1 and sum(p) == 1 and min(q) > 0 and min(p) > 0
    return q, p


def _omega(name: str, prm: dict, w: Fraction, a: int, variant: str) -> Fraction:
    """The weight of a token with ratio w and advantage sign a, its tie decided by ``variant``."""
    kept = min(w, Fraction(prm["cap"])) if name == "tis_mask" else w
    if name in ("ppo_clip", "dual_clip"):
        e = Fraction(prm["clip_epsilon"])
        c = Fraction(prm["cap"]) if name == "dual_clip" else None
        if a > 0:
            out, tie = w > 1 + e, w == 1 + e
        else:
            out = w < 1 - e or (c is not None and w > c)
            tie = w == 1 - e or (c is not None and w == c)
    elif name == "mis":
        c = Fraction(prm["cap"])
        out, tie = w > c, w == c
    else:
        lo, hi = (Fraction(x) for x in prm["band"])
        out, tie = w < lo or w > hi, (lo > 0 and w == lo) or w == hi
    if out:
        return Fraction(0)
    if tie:
        return {"keep": kept, "drop": Fraction(0), "half": kept / 2}[variant]
    return kept


def _drift(w: list[Fraction]) -> mpmath.mpf:
    """The law's logit oscillation log(max w / min w), padded upward."""
    with mpmath.workdps(40):
        s = mpmath.log(mpmath.mpf(max(w).numerator) / max(w).denominator)
        s -= mpmath.log(mpmath.mpf(min(w).numerator) / min(w).denominator)
        return s * (1 + mpmath.mpf(10) ** -20) + mpmath.mpf(10) ** -30


_r, _e = sympy.Symbol("r", nonnegative=True), sympy.Symbol("e", nonnegative=True)


@functools.cache
def _band_forms(lo: float, hi: float):
    """The band's log-ratio and TV forms as functions of r and of the TV."""
    lo_s = 0 if lo == 0 else sympy.nsimplify(lo)
    hi_s = sympy.nsimplify(hi)
    ratio = sympy.lambdify([_r], C.band_ratio(_r, lo_s, hi_s), "mpmath")
    tv = sympy.lambdify([_e], C.band_tv(_e, lo_s, hi_s), "mpmath")
    return ratio, tv


def _band_of(name: str, prm: dict) -> tuple[float, float]:
    if name == "mis":
        return 0.0, prm["cap"]
    if name in ("ppo_clip", "dual_clip"):
        e = prm["clip_epsilon"]
        return 1 - e, min(1 + e, prm.get("cap", 1 + e))
    return prm["band"]


@examples(20)
@given(_estimator(), st.data())
def test_masks_bound_every_tie_rule(estimator, data):
    name, prm = estimator
    q, p = data.draw(_law(_thresholds(name, prm)))
    w = [b / a for a, b in zip(q, p, strict=True)]
    signs = data.draw(st.lists(st.sampled_from([1, -1]), min_size=len(w), max_size=len(w)))
    variants = data.draw(st.lists(st.sampled_from(VARIANTS), min_size=len(w), max_size=len(w)))
    d = sum(
        qi * abs(_omega(name, prm, wi, a, v) - wi)
        for qi, wi, a, v in zip(q, w, signs, variants, strict=True)
    )
    bound = bounds.pg_bias_bound(name, osc=float(_drift(w)), **prm)
    assert within(float(d), bound), (name, prm, w, signs, variants, float(d), bound)
    if name == "tis_mask" and prm["cap"] < prm["band"][1]:
        return  # the sum form is checked through pg_bias_bound only
    ratio, tv = _band_forms(*_band_of(name, prm))
    r = max(abs(mpmath.log(mpmath.mpf(x.numerator) / x.denominator)) for x in w)
    total_variation = sum(max(b - a, 0) for a, b in zip(q, p, strict=True))
    assert within(float(d), float(ratio(r * (1 + mpmath.mpf(10) ** -20)))), (name, w)
    assert within(
        float(d), float(tv(mpmath.mpf(total_variation.numerator) / total_variation.denominator))
    )


@pytest.mark.parametrize(
    ("name", "prm"),
    [
        ("icepop", {"band": (0.5, 2.0)}),
        ("seq_mask", {"band": (0.75, 1.25)}),
        ("tis_mask", {"cap": 4.0, "band": (0.25, 1.5)}),
        ("dual_clip", {"clip_epsilon": 0.25, "cap": 1.125}),
    ],
)
def test_a_law_on_both_band_ends_is_dropped_whole_within_the_bound(name, prm):
    """Two tokens, one at each end of the band (mass (hi − 1)/(hi − lo) at lo): a rule that
    drops ties drops everything, D = 1, at exactly the drift where both sides switch on; the
    bound's jump is closed there (1 from the threshold on), so it is 1 as well."""
    lo, hi = (Fraction(x) for x in _band_of(name, prm))
    a = (hi - 1) / (hi - lo)
    q, w = [a, 1 - a], [lo, hi]
    signs = [-1, -1] if name == "dual_clip" else [1, 1]  # A < 0 meets both ends of dual clip
    pairs = zip(q, w, signs, strict=True)
    d = sum(qi * abs(_omega(name, prm, wi, sg, "drop") - wi) for qi, wi, sg in pairs)
    assert d == 1
    assert within(1.0, bounds.pg_bias_bound(name, osc=float(_drift(w)), **prm))


@st.composite
def _dyadic_law(draw):
    """(π', π) with dyadic entries over 2 to 5 tokens, π ≠ π'."""
    n = draw(st.integers(2, 5))
    qa = draw(st.lists(st.integers(1, 32), min_size=n, max_size=n))
    pa = draw(st.lists(st.integers(1, 32), min_size=n, max_size=n))
    # make both sum to a power of two by padding the last entry
    size = 2 ** max(sum(qa), sum(pa)).bit_length()
    qa[-1] += size - sum(qa)
    pa[-1] += size - sum(pa)
    q, p = [Fraction(a, size) for a in qa], [Fraction(b, size) for b in pa]
    return q, p


@examples(30)
@given(_dyadic_law(), st.sampled_from(VARIANTS), st.data())
def test_position_masks_bound_every_tie_rule(law, variant, data):
    """tv_mask at τ = the position's TV and dppo_tv at τ = one token's |π(y) − π'(y)|: the tie
    drops the whole position (tv_mask) or the token (dppo_tv), or halves it, or keeps it."""
    q, p = law
    w = [b / a for a, b in zip(q, p, strict=True)]
    tv = sum(max(b - a, 0) for a, b in zip(q, p, strict=True))
    s = float(_drift(w))
    share = {"keep": Fraction(0), "drop": Fraction(1), "half": Fraction(1, 2)}[variant]
    if 0 < tv < 1:  # tv_mask: D = share·Σ π'w = share
        assert within(float(share), bounds.pg_bias_bound("tv_mask", osc=s, threshold=float(tv)))
    i = data.draw(st.integers(0, len(q) - 1))
    gap = abs(p[i] - q[i])
    if 0 < gap < 1:  # dppo_tv: every token whose gap equals τ in the direction its sign pushes
        signs = data.draw(st.lists(st.sampled_from([1, -1]), min_size=len(q), max_size=len(q)))
        d = Fraction(0)
        for qi, pi, a in zip(q, p, signs, strict=True):
            push = pi - qi if a > 0 else qi - pi
            lost = 1 if push > gap else (share if push == gap else 0)
            d += qi * (pi / qi) * lost
        assert within(float(d), bounds.pg_bias_bound("dppo_tv", osc=s, threshold=float(gap)))
