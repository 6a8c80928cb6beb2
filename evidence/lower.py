"""Per-token lower bounds of the full-vocabulary metrics from a sampled token's two log-probs,
rounded outward: each is at most the exact value of the logged doubles.

From ℓ = log π(y) (K_train) and ℓ' = log π'(y) (K_inf) of the sampled token y, with
π = softmax(z/T) and π' = softmax(z'/T):

- oscillation: |log w(y)| = |ℓ − ℓ'| ≤ osc/T, so osc ≥ T·|ℓ − ℓ'|;
- drift: osc ≤ 2δ, so δ ≥ T·|ℓ − ℓ'|/2;
- TV: TV = sup_A |π(A) − π'(A)| ≥ |π(y) − π'(y)| = |e^ℓ − e^ℓ'| (A = {y});
- KL, either direction: the KL of the two-set partition {y, rest} is a lower bound (data
  processing), and that is ≥ 2·(π(y) − π'(y))² (Pinsker on two points).

**Impossible values.** A log-probability cannot exceed 0; an engine's log-softmax rounding can
leave one a hair above it. Each log-prob (and each log kept mass) is read as its nearest
possible value, min(ℓ, 0), before any bound is formed. The map is monotone and 1-Lipschitz, so
it never widens the gap between the two log-probs: a value above 0 never proves drift.

**Outward rounding.** ``e^ℓ − e^ℓ'`` in doubles cancels: two log-probs 6e-20 apart near 0
exponentiate to doubles one ulp (1.1e-16) apart, or equal. The gap is formed instead as
``e^a·(−expm1(−d))`` with a = max(ℓ, ℓ') and d = |ℓ − ℓ'|, whose every step has a small
*relative* error: the subtraction d (½ ulp; exact when subnormal), ``exp`` and ``expm1`` (NumPy's
own accuracy tests hold both to 1 ulp in float64; libm's are within 1 ulp), and the product
(½ ulp). So is T·d. Each bound is then lowered by ``MARGIN`` = 2^-44 of itself, which covers
255 ulps of error in each function, and by ``TINY`` = 2^-1070 (16 of the smallest subnormals),
which covers the absolute error of a result that underflows; it is never taken below 0. What
is left is a true lower bound, within a relative 2^-43 of the exact one wherever that is a
normal double (``tests/evidence/test_lower_bounds.py`` checks both against 50-digit arithmetic).

With truncated sampling a log's processed ℓ'_p is corrected by the log kept mass, ℓ' = ℓ'_p +
log S; the double sum s is one rounding away from it, and its error e = ℓ' − s is a double,
found exactly (TwoSum). The distance d is formed as |(ℓ − s) − e| (ℓ − s is exact where the
two are close, and where they are not, e is below an ulp of either), and the factor e^a at the
lower end s⁻ of ℓ''s enclosure when e < 0 (lower by at most an ulp of a: a relative 1.2e-13
for a above −745, below which e^a is 0). Within a relative 1e-12 of the exact bound, then.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

__all__ = ["MARGIN", "TINY", "lower_bounds", "possible"]

MARGIN = 2.0**-44
TINY = 2.0**-1070
_MAX = float(np.finfo(np.float64).max)

Column = Float[np.ndarray, " tokens"]


def possible(logprob: Column) -> Column:
    """Each log-probability's nearest possible value: min(ℓ, 0) (NaN stays NaN)."""
    x = np.asarray(logprob, dtype=np.float64)
    return np.where(x > 0.0, 0.0, x)


def _down(x: np.ndarray) -> np.ndarray:
    """A finite ``x ≥ 0`` lowered by ``MARGIN`` of itself and by ``TINY``, never below 0;
    infinities and NaN pass through."""
    with np.errstate(invalid="ignore", over="ignore"):
        lowered = np.maximum(x - (np.abs(x) * MARGIN + TINY), 0.0)
    return np.where(np.isfinite(x), lowered, x)


def _split_sum(processed: np.ndarray, log_kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, e) with processed + log_kept = s + e exactly (both ≤ 0): the rounded sum and its
    TwoSum error. A sum of two finite values below −max (rounded to −inf) is replaced by −max
    (above the exact one), with e = 0; where a part is −inf, s = −inf and e = 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = processed + log_kept
        back = s - processed
        err = (processed - (s - back)) + (log_kept - back)
    overflow = np.isneginf(s) & np.isfinite(processed) & np.isfinite(log_kept)
    s = np.where(overflow, -_MAX, s)
    return s, np.where(np.isfinite(err) & ~overflow, err, 0.0)


def lower_bounds(
    train_logprob: Column,
    rollout_logprob: Column,
    temperature: float,
    *,
    log_kept_mass: Column | None = None,
) -> dict[str, Column]:
    """Per-token lower bounds of ``logit_oscillation``, ``logit_drift``, ``tv`` and ``kl``
    (the larger direction) from the logged ℓ (``train_logprob``) and ℓ' (``rollout_logprob``,
    corrected by ``log_kept_mass`` when given): see the module docstring. Every value is ≤ the
    exact bound of the logged doubles, each read as its ``possible`` value. Where nothing is
    known (both log-probs −inf, a NaN) the bound is the trivial 0; an infinite gap (exactly
    one log-prob −inf) stays infinite."""
    lt = possible(train_logprob)
    if log_kept_mass is None:
        s, e = possible(rollout_logprob), 0.0  # ℓ' = s exactly
    else:
        s, e = _split_sum(possible(rollout_logprob), possible(log_kept_mass))
    with np.errstate(invalid="ignore", over="ignore"):
        # d = |ℓ − s − e|: ℓ − s is exact when they are close (Sterbenz), and far apart |e| ≤
        # ½ ulp(s) is negligible beside it: a few ulps either way. NaN when both are −inf.
        d = np.abs((lt - s) - e)
        raw = temperature * d
        over = np.isinf(raw) & np.isfinite(d)  # T·d above the largest double: T > 1
        osc = np.where(over, _MAX, raw)
        half = np.where(over, (temperature * 0.5) * d, raw * 0.5)
        half = np.where(np.isinf(half) & np.isfinite(d), _MAX, half)
        # the larger log-prob, taken at the lower end of ℓ''s enclosure (s⁻ when e < 0, else s)
        low = np.where(e < 0, np.nextafter(s, -np.inf), s)
        top = np.maximum(lt, low)
        gap = np.exp(top) * -np.expm1(-d)  # e^a − e^{a−d}, without cancellation
    tv = _down(gap)
    kl = 2.0 * tv * tv  # tv ≥ 0, so this is ≤ 2·gap² before its rounding
    bounds = {
        "logit_oscillation": _down(osc),
        "logit_drift": _down(half),
        "tv": tv,
        "kl": _down(kl),
    }
    return {k: np.where(np.isnan(v), 0.0, v) for k, v in bounds.items()}
