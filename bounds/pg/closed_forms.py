"""Closed forms for the off-policy corrections beyond plain/TIS/MIS, and their exact suprema.

Setting as in ``bounds.pg.links``: rollouts sample from π' (inference), the learner wants E_π
(training), w = π/π'. A token-level estimator multiplies ∇log π(y)·A(y) by a weight ω(y); its
bias at one position is ‖E_π'[(ω − w)·g]‖ ≤ G·A·E_π'|ω − w|, attained when g = ∇log π·A has norm
G·A and points the same way wherever ω ≠ w. Every form below is the supremum (or a bound on it)
of that discrepancy D = E_π'|ω − w| over the kernel pairs a premise allows:

- masks that drop tokens (``icepop``, ``ppo_clip``, ``geo_mask``) have D = π(dropped set);
- TIS with a cap c ≤ 1 has D = E_π'(w − c)₊ = 1 − c + E_π'(c − w)₊ (the second term is the
  TIS excess of the swapped pair at cap 1/c, scaled by c);
- position masks (``tv_mask``, ``kl_mask``) keep ω = w or drop the whole position: D ∈ {0, 1};
  so do DPPO's sign-aware binary masks (``dppo_tv``, ``dppo_kl``) and, per position of a
  sequence of L ≥ 2 tokens, the one-outlier rejection (``seq_outlier``);
- ``dual_clip`` is a band [1 − ε, min(1 + ε, c)] (the advantage's sign is free per token);
  ``opsm`` a geometric-mean band [e^{−δ}, ∞) without an upper end (``hi = None``);
- ``seq_mask`` drops whole sequences by W: D_seq = π_L(W ∉ [lo, hi]), bounded by the band's
  ratio form at R = L·r and its TV form at the sequence TV.

Ties. A token exactly on a threshold (w at a band's end or cap, a divergence equal to τ) gets
w, 0 or w/2 depending on the framework's code (``kernels.rl.ties``): |ω − w| ≤ w there, what
dropping it costs. Every form below bounds the discrepancy of the rule that drops ties too: the
extremal laws put the dropped mass at the far end of the premise's range, not on the threshold,
and every jump is closed (``step_above`` is 1 from its threshold on). The ``*_sup`` functions
are the suprema of the strict rule; a tie-dropping rule's differ only where e^r or e^s equals a
jump's threshold exactly (a band end, hi/lo), which no rational premise r, s > 0 meets
(``tests/bounds/test_tie_bounds.py``).

Jumps. Several suprema jump (a band's both sides fill at once; a position mask switches on when
the divergence can pass τ). z3 and the interval arithmetic need continuous forms, so a jump
1[x > a] is written ``step_above(x, a)``: 0 up to a·(1 − η), 1 from a on, linear between, with
η = 10⁻⁶. It lies above the jump (sound) and equals it outside the sliver (a(1 − η), a]; a
derivation whose premise maximum lands in a sliver is not marked attained. ``*_sup`` functions
give the exact suprema (jumps included) for tests, witnesses and plots.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import sympy

__all__ = [
    "ETA",
    "band_drift",
    "band_ratio",
    "band_ratio_sup",
    "band_sup",
    "band_tv",
    "band_tv_factor",
    "in_sliver",
    "k3_band",
    "k_value",
    "kl_anchor",
    "kl_iterate",
    "outlier_step",
    "outlier_sup",
    "seq_mask_azuma",
    "seq_mask_ratio",
    "seq_mask_tv",
    "seq_tis_kl",
    "seq_tis_kl_factor",
    "seq_tis_ratio",
    "seq_tis_tv",
    "step_above",
    "tis_excess_ratio_sup",
    "tis_excess_sup",
    "tis_small_cap_drift",
    "tis_small_cap_ratio",
    "tis_small_cap_tv",
]

ETA = sympy.Rational(1, 10**6)  # relative width of the ramp that stands for a jump
Num = float | int | Fraction | mpmath.mpf


def step_above(x: sympy.Expr, at: sympy.Expr) -> sympy.Expr:
    """A continuous majorant of 1[x > at] (at > 0), exact outside (at·(1 − η), at]."""
    return sympy.Min(1, sympy.Max(0, (x - at * (1 - ETA)) / (at * ETA)))


def in_sliver(x: Num, at: Num) -> bool:
    """Whether ``step_above(x, at)`` differs from 1[x > at] at ``x``."""
    a = mpmath.mpf(at.numerator) / at.denominator if isinstance(at, Fraction) else mpmath.mpf(at)
    return a * (1 - mpmath.mpf(ETA.p) / ETA.q) < mpmath.mpf(x) <= a


# ---- TIS with a cap c ≤ 1 ------------------------------------------------------------------
def tis_small_cap_drift(s: sympy.Expr, cap: sympy.Expr) -> sympy.Expr:
    """sup E_π'(w − c)₊ over tilts of range s, 0 < c < 1: 1 − c + (√c·e^{s/2} − 1)₊²/(e^s − 1).

    E(w − c)₊ = 1 − c + E(c − w)₊ and E_π'(c − w)₊ = c·E_π(π'/π − 1/c)₊, the TIS excess of the
    swapped pair (also a tilt of range s) at cap 1/c > 1, whose supremum is (e^{s/2} − c^{-1/2})₊²
    /(e^s − 1). The denominator is written max(e^s − 1, 1/c − 1): equal wherever the numerator
    is nonzero (e^s > 1/c), and bounded away from 0. At c = 1 the form is tanh(s/4).
    """
    num = sympy.Max(sympy.sqrt(cap) * sympy.exp(s / 2) - 1, 0) ** 2
    return 1 - cap + num / sympy.Max(sympy.exp(s) - 1, 1 / cap - 1)


def tis_small_cap_ratio(r: sympy.Expr, cap: sympy.Expr) -> sympy.Expr:
    """sup E_π'(w − c)₊ when |log w| ≤ r, 0 ≤ c ≤ 1: 1 − c + (c − e^{−r})₊/(1 + e^{−r}).

    (c − w)₊ is convex in w, E_π' w = 1 and w ∈ [e^{−r}, e^r]: two atoms at e^{±r}, weight
    e^r/(1 + e^r) on e^{−r}, give (c·e^r − 1)₊/(1 + e^r)."""
    return 1 - cap + sympy.Max(cap - sympy.exp(-r), 0) / (1 + sympy.exp(-r))


def tis_small_cap_tv(eps: sympy.Expr, cap: sympy.Expr) -> sympy.Expr:
    """sup E_π'(w − c)₊ when TV ≤ ε, 0 ≤ c ≤ 1: 1 − c + c·ε ((c − w)₊ ≤ c·(1 − w)₊, equal
    where w ∈ {0} ∪ [1, ∞): mass ε moved off tokens π keeps almost nothing of)."""
    return 1 - cap + cap * eps


def tis_excess_sup(s: Num, cap: Num) -> mpmath.mpf:
    """The exact sup of E_π'(w − c)₊ over tilts of range ``s``, for every cap c ≥ 0."""
    s, c = mpmath.mpf(s), mpmath.mpf(cap)
    if s == 0:
        return max(1 - c, mpmath.mpf(0))
    if c >= 1:
        return max(mpmath.exp(s / 2) - mpmath.sqrt(c), 0) ** 2 / mpmath.expm1(s)
    return 1 - c + max(mpmath.sqrt(c) * mpmath.exp(s / 2) - 1, 0) ** 2 / mpmath.expm1(s)


def tis_excess_ratio_sup(r: Num, cap: Num) -> mpmath.mpf:
    """The exact sup of E_π'(w − c)₊ over laws with |log w| ≤ ``r``, every c ≥ 0."""
    x, c = mpmath.exp(r), mpmath.mpf(cap)
    if c >= 1:
        return max(x - c, 0) / (1 + x)
    return 1 - c + max(c * x - 1, 0) / (1 + x)


# ---- masks of a ratio band [lo, hi] (icepop; ppo_clip with lo, hi = 1 ∓ ε; geo_mask) ---------
def band_drift(
    s: sympy.Expr,
    lo: sympy.Expr | int,
    hi: sympy.Expr | None,
    L: sympy.Expr | int = 1,
    upper_idle: bool = False,
) -> sympy.Expr:
    """sup π(w ∉ [lo, hi]) over tilts of range s, for one position whose drop is decided by the
    geometric-mean ratio of a sequence of at most L tokens (L = 1: the token's own ratio).

    One side: with the other ≤ L − 1 tokens' log ratios at ∓s the band the current token meets
    is [lo*, hi*] with lo* = max(lo, lo^L e^{(L−1)s}), hi* = min(hi, hi^L e^{−(L−1)s}); the
    one-sided suprema are (lo*·e^s − 1)₊/(e^s − 1) and (e^s − hi*)₊/(e^s − 1) (MIS-type
    arguments), and lo*·e^s = max(lo·e^s, (lo·e^s)^L). Both sides at once need e^s > hi/lo and
    then drop everything. ``lo = 0`` (no lower end) is passed as the integer 0.

    ``upper_idle`` picks between two equal ways of writing the upper side (L > 1): the solver
    proves it 0 at once when written through e^{min(0, L(log hi − s))}, and bounds it fastest
    through e^{clamp(L log hi − (L − 1)s, 0, s)} where it is positive; a derivation picks by
    its premise box (the value is the same for every s either way). ``hi = None``: a band
    without an upper end (only the lower side drops).
    """
    x = sympy.exp(s)
    if hi is None:
        return sympy.Min(1, _lower_drift(s, lo, L))
    if L == 1:
        upper = sympy.Max(x - hi, 0)
    elif upper_idle:
        # e^s − min(hi*, e^s) = e^s·(1 − e^{min(0, L(log hi − s))}); hi* is clamped to ≥ 1 (the
        # exponent to ≥ −s): below 1 the form is 1 anyway
        upper = x * (1 - sympy.exp(sympy.Min(0, sympy.Max(-s, L * (sympy.log(hi) - s)))))
    else:  # the same, e^s − e^{log hi*} with log hi* clamped to [0, s]
        upper = x - sympy.exp(sympy.Max(0, sympy.Min(s, L * sympy.log(hi) - (L - 1) * s)))
    terms = [upper / sympy.Max(x - 1, hi - 1)]
    if lo != 0:
        terms += [_lower_drift(s, lo, L), step_above(x, hi / lo)]
    return sympy.Min(1, sympy.Max(*terms))


def _lower_drift(s: sympy.Expr, lo: sympy.Expr, L: sympy.Expr | int) -> sympy.Expr:
    """The lower side of ``band_drift``: (lo*·e^s − 1)₊/(e^s − 1)."""
    x = sympy.exp(s)
    if L == 1:
        lower = sympy.Max(lo * x - 1, 0)
    else:
        # (lo·e^s)^L clamped to [1, e^s]: below 1 the side drops nothing, above e^s all
        down = sympy.Max(0, sympy.Min(L * (s + sympy.log(lo)), s))
        lower = sympy.Max(sympy.exp(down) - 1, 0)
    return lower / sympy.Max(x - 1, (1 - lo) / lo)


def band_ratio(
    r: sympy.Expr, lo: sympy.Expr | int, hi: sympy.Expr | None, L: sympy.Expr | int = 1
) -> sympy.Expr:
    """sup π(w ∉ [lo, hi]) when |log w| ≤ r on every token, for a position whose drop is decided
    by the geometric mean of at most L tokens (L = 1: its own ratio, the icepop band).

    The other n − 1 ≤ L − 1 log ratios at ∓r move the band the token meets to
    [l, h] = [lo^n e^{∓(n−1)r}, hi^n e^{∓(n−1)r}]; the two-atom suprema are l(e^r − 1)/(e^r − l)
    once e^{−r} < l and h(e^r − 1)/(h·e^r − 1) once e^r > h (l < 1 < h), increasing in l and
    decreasing in h, so extremal at l = min(1, max(lo, lo^L e^{(L−1)r})) and
    h = max(1, min(hi, hi^L e^{−(L−1)r})); each side switches on exactly when e^{−r} < lo, resp.
    e^r > hi (a jump, as ``step_above``), and both at once drop everything. The denominators
    are written with their values at the switch (1/lo − 1, hi − 1), below which they never go
    where the side is on. ``hi = None``: no upper end.
    """
    x = sympy.exp(r)
    terms = []
    if hi is not None:
        up = step_above(x, hi)
        h = sympy.exp(sympy.Max(0, sympy.Min(sympy.log(hi), L * sympy.log(hi) - (L - 1) * r)))
        h = hi if L == 1 else h
        terms.append(h * (x - 1) / sympy.Max(h * x - 1, hi - 1) * up)
    if lo != 0:
        down = step_above(x, 1 / lo)
        if L == 1:
            low = lo
        else:
            low = sympy.exp(sympy.Min(0, sympy.Max(sympy.log(lo), L * sympy.log(lo) + (L - 1) * r)))
        terms.append(low * (x - 1) / sympy.Max(x - low, (1 - lo) / lo) * down)
        if hi is not None:
            terms.append(sympy.Min(up, down))
    return sympy.Min(1, sympy.Max(*terms))


def band_tv_factor(lo: sympy.Expr | int, hi: sympy.Expr | None) -> sympy.Expr:
    """K with sup π(w ∉ [lo, hi]) = min(1, K·TV): K = hi/(hi − 1) + lo/(1 − lo) (the first
    term absent without an upper end)."""
    return (0 if hi is None else hi / (hi - 1)) + lo / (1 - lo)


def band_tv(eps: sympy.Expr, lo: sympy.Expr | int, hi: sympy.Expr | None) -> sympy.Expr:
    """sup π(w ∉ [lo, hi]) when TV ≤ ε: min(1, K·ε). π(w > hi) < hi/(hi − 1)·(π − π')(w > hi) and
    π(w < lo) < lo/(1 − lo)·(π' − π)(w < lo), each difference ≤ TV; approached with w just
    outside the band on both sides and w = 1 elsewhere."""
    return sympy.Min(1, eps * band_tv_factor(lo, hi))


def band_sup(s: Num, lo: Num, hi: Num | None, L: int = 1) -> mpmath.mpf:
    """The exact sup of π(dropped) for ``band_drift`` (jumps included; ``hi = None``: no upper
    end)."""
    s, lo = mpmath.mpf(s), mpmath.mpf(lo)
    hi = mpmath.inf if hi is None else mpmath.mpf(hi)
    if s == 0:
        return mpmath.mpf(0)
    x = mpmath.exp(s)
    if lo > 0 and x > hi / lo:
        return mpmath.mpf(1)
    lo_star = max(lo, lo**L * mpmath.exp((L - 1) * s)) if lo > 0 else mpmath.mpf(0)
    hi_star = min(hi, hi**L * mpmath.exp(-(L - 1) * s))
    d = max(lo_star * x - 1, 0) / (x - 1)
    u = max(x - hi_star, 0) / (x - 1)
    return min(mpmath.mpf(1), max(d, u))


def band_ratio_sup(r: Num, lo: Num, hi: Num | None, L: int = 1) -> mpmath.mpf:
    """The exact sup of π(dropped) for ``band_ratio`` (jumps included; ``hi = None``: no upper
    end)."""
    r, lo = mpmath.mpf(r), mpmath.mpf(lo)
    hi = mpmath.inf if hi is None else mpmath.mpf(hi)
    x = mpmath.exp(r)
    up, down = x > hi, lo > 0 and x * lo > 1
    if up and down:
        return mpmath.mpf(1)
    if up:
        h = max(1, min(hi, hi**L * mpmath.exp(-(L - 1) * r)))
        return h * (x - 1) / (h * x - 1)
    if down:
        low = min(1, max(lo, lo**L * mpmath.exp((L - 1) * r)))
        return low * (x - 1) / (x - low)
    return mpmath.mpf(0)


# ---- sequence-wide masks: one outlier token (seq_outlier), the product W (seq_mask) --------
def outlier_step(x: sympy.Expr, lo: sympy.Expr | int, hi: sympy.Expr) -> sympy.Expr:
    """A continuous majorant of 1[x > hi or lo·x > 1], x = e^s (drift) or e^r (log ratio).

    Per position of a sequence of L ≥ 2 tokens that one token outside [lo, hi] drops: where
    no token's w can leave the band (e^s ≤ hi and lo·e^s ≤ 1) nothing is dropped; where one
    can, an earlier token outside the band drops the whole position (D = 1)."""
    terms = [step_above(x, hi)]
    if lo != 0:
        terms.append(step_above(x, 1 / lo))
    return sympy.Max(*terms)


def outlier_sup(x: Num, lo: Num, hi: Num, L: int) -> mpmath.mpf:
    """The exact per-position sup of π(dropped) for ``seq_outlier`` at L ≥ 2, x = e^s or e^r
    (the ratio premise reaches w = e^r itself; the drift premise approaches e^s from below, so
    either way a token leaves the band exactly when x > hi or lo·x > 1)."""
    if L < 2:
        raise ValueError("outlier_sup is the L ≥ 2 form; one token is the icepop band")
    x = mpmath.mpf(x)
    return mpmath.mpf(1) if x > hi or (lo > 0 and x * lo > 1) else mpmath.mpf(0)


def seq_mask_ratio(R: sympy.Expr, lo: sympy.Expr | int, hi: sympy.Expr) -> sympy.Expr:
    """sup π_L(W ∉ [lo, hi]) over sequence laws with |log W| ≤ R (R = L·r): the band's ratio
    form at R (its derivation uses only W ∈ [e^{−R}, e^R] and E_π' W = 1). A bound for
    sequence laws, whose W are further constrained."""
    return band_ratio(R, lo, hi)


def seq_mask_azuma(
    width: sympy.Expr, L: sympy.Expr | int, lo: sympy.Expr | int, hi: sympy.Expr
) -> sympy.Expr:
    """π_L(W ∉ [lo, hi]) ≤ min(1, hi·e^{−2 log²hi/(L·v²)} + e^{−2 log²lo/(L·v²)}) for sequences
    of at most L tokens whose log w lies, at every prefix, in an interval of width v (v = s
    from a drift premise, 2r from |log w| ≤ r).

    Upper side (Chernoff): π_L(W > hi) ≤ hi^{−λ}·E_π'[W^{1+λ}], and step by step
    E_π'[w^{1+λ}] ≤ e^{(1+λ)²v²/8} (Hoeffding's lemma, E_π' log w = −KL ≤ 0); λ = 4 log hi/(L v²)
    − 1 gives hi·e^{−2 log²hi/(L v²)}, which is ≥ 1 wherever that λ is not positive. Lower side
    (Azuma under π): log W − Σ_t KL(π_t‖π'_t) is a sum of L increments of range v and the KL
    terms are ≥ 0, so π_L(log W < log lo) ≤ e^{−2 log²lo/(L v²)}. The width enters as
    max(v², 10⁻³⁰) (larger, so sound; no division by 0 at v = 0).

    Checked on enumerated sequence laws in ``tests/bounds/test_peer_corrections.py``."""
    v2 = sympy.Max(width**2, sympy.Rational(1, 10**30))
    # each exponent is held above −600 (a larger bound, still sound; e^−600 ≈ 3e−261), so the
    # solver never meets e to a huge negative power near v = 0
    terms = sympy.exp(sympy.Max(-600, sympy.log(hi) - 2 * sympy.log(hi) ** 2 / (L * v2)))
    if lo != 0:
        terms += sympy.exp(sympy.Max(-600, -2 * sympy.log(lo) ** 2 / (L * v2)))
    return sympy.Min(1, terms)


def seq_mask_tv(tv: sympy.Expr, lo: sympy.Expr | int, hi: sympy.Expr) -> sympy.Expr:
    """π_L(W ∉ [lo, hi]) ≤ min(1, K·TV_L), K = hi/(hi − 1) + lo/(1 − lo) (the band's TV form
    applied to the sequence laws)."""
    return band_tv(tv, lo, hi)


# ---- rejection by a KL estimator (kl_reject) -----------------------------------------------
def k_value(k: int, x: sympy.Expr) -> sympy.Expr:
    """The largest k2 = u²/2 or k3 = e^u − 1 − u over |u| ≤ x (k3's is at u = +x)."""
    return x**2 / 2 if k == 2 else sympy.exp(x) - 1 - x


def k3_band(tau: Fraction) -> tuple[Fraction, Fraction]:
    """A band [lo, hi] inside the ratios k3 = w − 1 − log w ≤ τ keeps: the two roots rounded
    inward to 12 digits, each certified in outward-rounded interval arithmetic to satisfy
    k3 ≤ τ. Masking outside it drops at least what k3 drops, so its bound is sound (a 10⁻¹²
    relative margin above the exact one)."""
    tau = Fraction(tau)
    # the roots sit about √(2τ) from 1: enough digits to resolve that distance 12 times over
    tiny = max(0, -int(mpmath.floor(mpmath.log10(mpmath.mpf(tau.numerator) / tau.denominator))))
    with mpmath.workdps(60 + tiny):
        t = mpmath.mpf(tau.numerator) / tau.denominator

        def root(a, b):  # k3 − τ changes sign once on [a, b]: bisection
            above = a - 1 - mpmath.log(a) > t
            for _ in range(260):
                m = (a + b) / 2
                if (m - 1 - mpmath.log(m) > t) == above:
                    a = m
                else:
                    b = m
            return (a + b) / 2

        # k3(e^{−τ−2}) ≥ τ + 1 and k3(2τ + 4) = 2τ + 3 − log(2τ + 4) > τ bracket the roots
        lo, hi = root(mpmath.exp(-t - 2), mpmath.mpf(1)), root(mpmath.mpf(1), 2 * t + 4)

        def rounded(x, up: bool) -> Fraction:  # 12 digits of min(x, |x − 1|), inward
            scale = Fraction(10) ** (11 - int(mpmath.floor(mpmath.log10(min(x, abs(x - 1))))))
            n = mpmath.ceil(x * scale.numerator / scale.denominator)
            if not up:
                n = mpmath.floor(x * scale.numerator / scale.denominator)
            return Fraction(int(n)) / scale

        band = rounded(lo, up=True), rounded(hi, up=False)
    saved = mpmath.iv.prec
    mpmath.iv.prec = 200 + 4 * tiny
    try:
        limit = (mpmath.iv.mpf(tau.numerator) / tau.denominator).a
        for w in band:
            x = mpmath.iv.mpf(w.numerator) / w.denominator
            k3 = x - 1 - mpmath.iv.log(x)
            if w <= 0 or not k3.b <= limit:
                raise ArithmeticError(f"k3 band at τ = {tau} not certified")
    finally:
        mpmath.iv.prec = saved
    if not band[0] < 1 < band[1]:
        raise ArithmeticError(f"k3 band at τ = {tau} does not contain 1")
    return band


# ---- sequence-level truncated IS ----------------------------------------------------------
def seq_tis_ratio(R: sympy.Expr, cap: sympy.Expr, small: bool) -> sympy.Expr:
    """sup E_π'(W − c)₊ over laws of W ∈ [e^{−R}, e^R] with E_π' W = 1 (R = L·r for sequences of
    L tokens with |log w| ≤ r): the TIS ratio form (``small``: the c ≤ 1 branch), written in
    e^{−R} so that a long sequence does not overflow. A bound for sequence laws, whose W are
    further constrained."""
    y = sympy.exp(-R)
    if small:
        return 1 - cap + sympy.Max(cap - y, 0) / (1 + y)
    return sympy.Max(1 - cap * y, 0) / (1 + y)


def seq_tis_tv(tv: sympy.Expr, cap: sympy.Expr, small: bool) -> sympy.Expr:
    """E_π'(W − c)₊ from the sequence TV: ≤ TV_L for c ≥ 1 ((W − c)₊ ≤ (W − 1)₊), and
    1 − c + c·TV_L for c ≤ 1 (``small``; (c − W)₊ ≤ c·(1 − W)₊)."""
    return 1 - cap + cap * tv if small else tv


KL_ITERATIONS = 6


def seq_tis_kl_factor(cap: sympy.Expr, n: int = KL_ITERATIONS) -> sympy.Expr:
    """k with (W − c)₊ ≤ k·(W log W − W + 1) for every W ≥ 0 (c > 1): k = 1/log W₀ for any
    1 < W₀ ≤ W*, the root > 1 of W − 1 = c·log W (the best k is 1/log W*). W₀ = Fⁿ(c) with
    F(W) = 1 + c·log W: F is increasing with F(W*) = W* and F(c) ≥ c, so the iterates rise to
    W* from below (six iterations: within 3% of the best k at c = 2)."""
    return 1 / sympy.log(kl_iterate(cap, n))


def kl_iterate(cap: sympy.Expr, n: int = KL_ITERATIONS) -> sympy.Expr:
    """Fⁿ(c) with F(W) = 1 + c·log W: a point of (1, W*] for c > 1 (symbolic)."""
    w = cap
    for _ in range(n):
        w = 1 + cap * sympy.log(w)
    return w


def kl_anchor(cap: Fraction, n: int = KL_ITERATIONS) -> Fraction:
    """A rational W₀ ∈ (1, W*] for the cap c > 1: Fⁿ(c) rounded down to 12 digits, kept only if
    c·log W₀ ≥ W₀ − 1 holds in outward-rounded interval arithmetic (which is W₀ ≤ W*), else c
    itself (c·log c ≥ c − 1 always). One log of a rational keeps the solver's work small."""
    cap = Fraction(cap)
    with mpmath.workdps(60):
        c = mpmath.mpf(cap.numerator) / cap.denominator
        w = c
        for _ in range(n):
            w = 1 + c * mpmath.log(w)
        digits = 12 - int(mpmath.floor(mpmath.log10(w))) - 1
        # w ≥ 10¹² (c ≳ 4e10) gives digits < 0: the scale is then 1/10^|digits|, kept exact
        scale = Fraction(10) ** digits
        anchor = int(mpmath.floor(w * scale.numerator / scale.denominator)) / scale
    saved = mpmath.iv.prec
    mpmath.iv.prec = 200
    try:
        num = mpmath.iv.mpf(anchor.numerator) / anchor.denominator
        slack = mpmath.iv.mpf(cap.numerator) / cap.denominator * mpmath.iv.log(num) - (num - 1)
        certified = anchor > 1 and slack.a > 0
    finally:
        mpmath.iv.prec = saved
    return anchor if certified else cap


def seq_tis_kl(kl: sympy.Expr, anchor: sympy.Expr) -> sympy.Expr:
    """E_π'(W − c)₊ ≤ min(1, KL(π_L‖π'_L)/log W₀) for c > 1 and W₀ ∈ (1, W*] (``kl_anchor``, or
    the iterate of ``seq_tis_kl_factor``): E_π'[W log W − W + 1] is the sequence KL, at most
    L·κ by the chain rule."""
    return sympy.Min(1, kl / sympy.log(anchor))
