"""The fused pass of full-vocabulary measurement over one block of rows (the fast path).

For each row, with z the K_train logits, z' the K_inf logits, T the temperature, d = z' − z
(0 where z = z', so a token that both kernels mask with −inf drops out), i₁ the first argmax of
z, w = d − d(i₁) (from the exact difference, see ``centred_drift``), a = z/T, π = softmax(a):

- e = exp(a − max a) and S = Σ e (one exponential per logit of z);
- c = Σ e·w / (S·T), the π-mean of the centred drift, and u = w/T − c, so E_π[u] = 0 and
  π'/π = e^u / E_π[e^u];
- e·φ(u) with φ(u) = e^u − 1 − u: its Taylor series for |u| < ½, e^u − 1 − u otherwise (a
  second exponential, computed only in blocks where some |u| ≥ ½), and e·ψ = e·φ + e·u with
  ψ = expm1(u), so φ and ψ keep their relative accuracy for every u;
- KL(π‖π') = log E_π[e^u] = log1p(Σ e·φ(u) / S);
- with r = u − KL(π‖π') = log π'/π: e^{−KL}·ψ + expm1(−KL) = expm1(r), so
  TV = Σ π·(−expm1(r))₊ = Σ (−(eψ·e^{−KL} + e·expm1(−KL)))₊ / S;
- KL(π'‖π) = E_π[ψ·u]·e^{−KL(π‖π')} − KL(π‖π') (Jeffreys' divergence E_π[ψ u]·e^{−KL} less
  one direction);
- entropy = log S − Σ e·(z − max z)/T / S, with log S = log n + log1p(S₋/n), S₋ the sum of
  e below the maximum and n = S − S₋ the number of logits at it (an integer, recovered exactly
  by rounding): for a peaked row S = 1 + S₋ with S₋ tiny, and log S taken from the rounded S
  would lose S₋ (the entropy, then of the order of S₋, with it).

Every sum is over a difference that is exact or relatively accurate (w, z − max z), so the
divergences keep their relative accuracy when the drift is tiny, even under a large common
drift. One exponential per pair of logits where every |u| of the block is below ½ (kernels
that differ slightly), two otherwise; nothing of size [tokens, vocab] is written outside the
block. Valid while
u ≤ ``EXTREME_U`` and no token has −inf on one side only; ``block_metrics`` flags other rows
as ``extreme`` (``kernels.measurement._measure`` recomputes them in the log domain).

The argmax of each row comes from the maxima of 128-logit chunks (``row_maxima``: one reduction
over all rows, before the block loop) and a search inside the winning chunk; ties go to the
first index, as in ``numpy.argmax``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

__all__ = [
    "EXTREME_U",
    "SERIES_BELOW",
    "block_metrics",
    "centred_drift",
    "log_mass",
    "phi_series",
    "row_maxima",
]

EXTREME_U = 30.0  # rows whose centred drift u exceeds this take the log-domain path
SERIES_BELOW = 0.5  # |u| below which φ(u) = e^u − 1 − u is summed as its Taylor series
_CHUNK = 128  # logits per chunk in the argmax search (a divisor of the vocabulary)

# 1/k! for k = 2..10: the series of φ on |u| < ½ to a relative 1e-9 (last term 2⁻¹¹/11!)
_INV_FACT = tuple(1.0 / math.factorial(k) for k in range(2, 11))


def phi_series(u: Float[ArrayLike, ...]) -> Float[Array, ...]:
    """φ(u) = e^u − 1 − u = u²(1/2! + u/3! + … + u⁸/10!), for |u| < ``SERIES_BELOW``."""
    acc = _INV_FACT[-1]
    for coef in reversed(_INV_FACT[:-1]):
        acc = coef + u * acc
    return u * u * acc


def log_mass(s, s_low):
    """log S from S = Σ e and S₋ = Σ e below the maximum (e = 1 at it): log n + log1p(S₋/n),
    n = round(S − S₋) the number of logits at the maximum (exact while S < 2²³)."""
    n = jnp.round(s - s_low)
    return jnp.log(n) + jnp.log1p(s_low / n)


def _loop(x):
    """``x`` unchanged (NaN stays NaN). On XLA's CPU backend the select keeps the elementwise
    work that produces ``x`` in one compiled loop, whose result a plain reduction then sums;
    without it the reduction library would take the products too and evaluate them one
    operation at a time (measured slower). Other backends fuse it away."""
    return jnp.where(x == x, x, jnp.nan)


def centred_drift(z, zp, i1):
    """d − d(i₁) for d = z' − z along the last axis, and d(i₁). z' − z rounds (unless z and z'
    lie within a factor 2), so its rounding error is carried (Knuth's two-sum) and the shift by
    d(i₁) cancels exactly what every logit shares. d = 0 where z = z' (both −inf included) and
    ±inf where one side alone is −inf; when d(i₁) itself is infinite the row is not shifted
    (d(i₁) is returned as 0)."""
    s = zp - z
    back = s - zp
    err = (zp - (s - back)) - (z + back)
    same = z == zp
    s = jnp.where(same, 0.0, s)
    err = jnp.where(same | ~jnp.isfinite(s), 0.0, err)
    s_top = jnp.take_along_axis(s, i1[..., None], axis=-1)
    err_top = jnp.take_along_axis(err, i1[..., None], axis=-1)
    s_top = jnp.where(jnp.isfinite(s_top), s_top, 0.0)
    return (s - s_top) + (err - err_top), s_top + err_top


def _first_max(x):
    """Per row of ``x`` [rows, vocab]: the first index of the maximum, the maximum, and the
    largest value at any other index (the runner-up, equal to the maximum under a tie)."""
    rows, vocab = x.shape
    width = math.gcd(vocab, _CHUNK)
    chunks = x.reshape(rows, vocab // width, width)
    cmax = _loop(jnp.max(chunks, axis=2))  # (else XLA merges the two maxima into a second pass)
    top = jnp.max(cmax, axis=1, keepdims=True)
    kidx = jnp.arange(vocab // width, dtype=jnp.float32)[None, :]  # float: a float reduction
    k = jnp.min(jnp.where(cmax == top, kidx, vocab), axis=1).astype(jnp.int32)
    chunk = jnp.take_along_axis(chunks, k[:, None, None], axis=1)[:, 0, :]
    jidx = jnp.arange(width, dtype=jnp.float32)[None, :]
    j = jnp.min(jnp.where(chunk == top, jidx, width), axis=1).astype(jnp.int32)
    others = jnp.max(jnp.where(kidx == k[:, None].astype(kidx.dtype), -jnp.inf, cmax), axis=1)
    inside = jnp.max(jnp.where(jidx == j[:, None].astype(jidx.dtype), -jnp.inf, chunk), axis=1)
    return k * width + j, top[:, 0], jnp.maximum(others, inside)


def row_maxima(z: Float[ArrayLike, "rows vocab"], zp: Float[ArrayLike, "rows vocab"]):
    """Per row: the first argmax i₁ of ``z``, its maximum, its runner-up, and the first argmax
    of ``zp``: what ``block_metrics`` needs before its pass. Computed for all rows at once
    (one read of each array), the per-row steps run once rather than once per block."""
    i1, zmax, runner_up = _first_max(z)
    j1, _, _ = _first_max(zp)
    return i1, zmax, runner_up, j1


def block_metrics(
    z: Float[ArrayLike, "rows vocab"],
    zp: Float[ArrayLike, "rows vocab"],
    y,
    inv_t,
    maxima=None,
) -> dict[str, Float[Array, " rows"]]:
    """Every column of ``kernels.measurement._measure.COLUMNS`` for a block of rows, and
    ``extreme``: the rows whose divergence columns must be recomputed in the log domain. ``maxima``:
    the block's rows of ``row_maxima`` (computed here when not given)."""
    rows = jnp.arange(z.shape[0])
    i1, zmax, runner_up, j1 = row_maxima(z, zp) if maxima is None else maxima
    w, pivot = centred_drift(z, zp, i1)  # w = d − d(i₁)
    w_hi, w_lo = jnp.max(w, axis=1), jnp.min(w, axis=1)
    hi, lo = w_hi + pivot[:, 0], w_lo + pivot[:, 0]

    t = z * inv_t - (zmax * inv_t)[:, None]
    e = _loop(jnp.exp(t))
    s = jnp.sum(e, axis=1)
    s_low = jnp.sum(_loop(jnp.where(t < 0, e, 0.0)), axis=1)
    c = (jnp.sum(_loop(e * w), axis=1) / s * inv_t)[:, None]
    ez = jnp.sum(_loop(jnp.where(e > 0, e * (z - zmax[:, None]), 0.0)), axis=1) * inv_t

    def centred(w):
        return w * inv_t - c

    # |u| < ½ as a test of w against per-row bounds: every loop below recomputes it from the
    # same w and the same bounds, so all agree on it bit for bit
    w_below, w_above = (c - SERIES_BELOW) / inv_t, (c + SERIES_BELOW) / inv_t

    def small(w):
        return (w > w_below) & (w < w_above)

    def divergences(series_only: bool):
        # e·φ(u) for every logit, in one loop: the series where |u| < ½, e·(e^u − 1 − u)
        # elsewhere (no cancellation there: |e^u − 1| + |u| < 10 φ(u)); its plain sum (a
        # reduction that reads it) makes XLA store it once for the loops below rather than
        # recompute it in each of them. ``series_only``: every |u| < ½, no e^u at all.
        u = centred(w)
        ephi = e * phi_series(u)
        if not series_only:
            ephi = jnp.where(small(w), ephi, e * (jnp.exp(u) - 1.0 - u))

        def epsi(w):  # e·ψ(u) = e·(φ(u) + u): a few roundings, as |ψ| ≥ φ/10 where |u| ≥ ½
            return ephi + e * centred(w)

        kl_pq = jnp.log1p(jnp.sum(ephi, axis=1) / s)
        k1 = jnp.exp(-kl_pq)[:, None]
        k2 = jnp.expm1(-kl_pq)[:, None]
        tv = jnp.sum(_loop(jnp.maximum(0.0, -(epsi(w) * k1 + e * k2))), axis=1) / s
        jeffreys = jnp.sum(_loop(epsi(w) * centred(w)), axis=1) / s
        return kl_pq, k1[:, 0], tv, jeffreys

    # when every |u| of the block is below ½ (the usual case: kernels that differ slightly),
    # the loops take the series alone: one exponential per pair of logits instead of two
    all_small = jnp.all((w_lo > w_below[:, 0]) & (w_hi < w_above[:, 0]))
    kl_pq, k1, tv, jeffreys = jax.lax.cond(
        all_small, lambda: divergences(True), lambda: divergences(False)
    )
    kl_qp = jnp.maximum(0.0, jeffreys * k1 - kl_pq)

    max_u = w_hi * inv_t - c[:, 0]
    return {
        "logit_drift": jnp.maximum(hi, -lo),
        "logit_oscillation": w_hi - w_lo,
        "tv": jnp.minimum(1.0, tv),
        "kl_train_inf": kl_pq,
        "kl_inf_train": kl_qp,
        "log_ratio": kl_pq - (w[rows, y] * inv_t - c[:, 0]),
        "top1_flip": (i1 != j1).astype(jnp.float32),
        "margin": zmax - runner_up,
        "entropy": log_mass(s, s_low) - ez / s,
        "token_prob": e[rows, y] / s,
        "extreme": ~(max_u <= EXTREME_U) | ~(w_lo > -jnp.inf),
    }
