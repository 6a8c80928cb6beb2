"""Full-vocabulary measurement that gives the same bits on every backend (``impl="portable"``).

The fast paths of ``kernels.measurement._measure`` (XLA's ``exp`` and ``log``, float reductions in
the backend's order, the host pass's reassociated sums) agree with each other to a documented
tolerance, not bit for bit, and not between machines. Evidence that a contract's verdict
rests on must not change with the machine, so ``evidence: emulate`` measures here: the same
formulas (see ``kernels.measurement.measure_fused``), every value kept in binary64 and built from
the parts of :mod:`kernels.numerics.portable`:

* the logits widened by their bits; d = z' − z and z − max z as correctly rounded binary64
  differences (exact unless the two values lie 2**29 apart), so no two-sum is needed;
* ``exp64``, ``expm1_64``, ``phi64``, ``log64`` and ``log1p64`` (integer range reductions,
  sealed Horner polynomials: within a few binary64 ulps);
* every inexact product sealed before a sum uses it, every sum a fixed pairwise tree, every
  maximum and argmax order-free (the first argmax is an integer minimum over the indices at
  the maximum);
* each column rounded once to float32 by integer operations (results below ``2**-126``: +0).

The binary64 formulas hold for every u up to ``EXTREME_U`` (where e·e^u still fits binary64
with room to spare); rows beyond it take the log-domain formulas of ``kernels.measurement._measure``
(a log-mean-exp shifted by its largest term), and rows where one kernel alone masks a token
(−inf) are summed directly from the two log-softmaxes, also in binary64. Both branches are
chosen per block by ``lax.cond``, which every backend evaluates alike. Logits below
``2**-126`` in magnitude count as 0, as everywhere in ``kernels``; a row with a NaN logit has
NaN divergences.

Rows run in blocks of ``BLOCK`` (the last one padded), so one vocabulary size compiles one
program. It is several times slower than the host pass, which is why it is not the default:
it is the path for evidence, not for millions of tokens.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Int

from kernel_contracts.kernels.measurement.columns import MEASURED_COLUMNS
from kernel_contracts.kernels.numerics.portable import (
    exp64,
    expm1_64,
    log1p64,
    log64,
    phi64,
    seal,
    sum64,
    to_float32,
    widen,
)

__all__ = ["BLOCK", "EXTREME_U", "measure_rows"]

BLOCK = 64  # rows per compiled call
EXTREME_U = 100.0  # rows whose centred drift u exceeds this take the log-domain formulas
_INF = float("inf")
_NAN = float("nan")


def _first_argmax(x, top):
    """The first index of ``top`` in each row of ``x`` (an integer minimum: order-free);
    0 for a row without it (a NaN maximum)."""
    iota = lax.broadcasted_iota(jnp.int32, x.shape, 1)
    first = jnp.min(jnp.where(x == top[:, None], iota, x.shape[1]), axis=1)
    return jnp.where(first < x.shape[1], first, 0)


def _take(x, index):
    return jnp.take_along_axis(x, index[:, None], axis=1)[:, 0]


def _log_mean_exp_centred(lp, p, u):
    """log E_p[e^u] for E_p[u] = 0 from log p, p and u, per row: log(1 + Σ p·φ(u)) with the
    terms of u > 1 taken as e^{log p + u} − p(1 + u) and the sum shifted by its largest
    exponent m (``kernels.measurement._measure``'s log-mean-exp, in binary64)."""
    big = u > 1.0
    x = jnp.where(big, lp + u, -_INF)
    m = jnp.maximum(0.0, jnp.max(x, axis=1, keepdims=True))
    shift = exp64(-m)
    small_terms = seal(seal(p * phi64(jnp.where(big, 0.0, u))) * shift)
    big_terms = exp64(x - m) - seal(seal(p * (1.0 + jnp.where(big, u, 0.0))) * shift)
    total = sum64(jnp.where(big, big_terms, small_terms))
    m, shift = m[:, 0], shift[:, 0]
    return jnp.where(m > 0, m + log64(shift + total), log1p64(total))


def _log_domain(t, s, u):
    """TV, both KL divergences and log π/π' of rows with an extreme u (``EXTREME_U``)."""
    lp = t - log64(s)[:, None]  # t is sealed
    p = exp64(lp)
    kl_pq = _log_mean_exp_centred(lp, p, u)
    r = u - kl_pq[:, None]  # log π' − log π
    lq = lp + r
    q = exp64(lq)
    tv = sum64(seal(p * jnp.maximum(0.0, -expm1_64(r))))
    c_q = sum64(seal(q * r))
    c_q = c_q + sum64(seal(q * (r - c_q[:, None])))
    kl_qp = _log_mean_exp_centred(lq, q, c_q[:, None] - r)
    return tv, kl_pq, kl_qp, -r


def _one_sided(z, zp, inv_t):
    """The same columns for rows where one kernel alone masks some token: the KL divergence
    towards the masking kernel is +inf, the rest summed directly from the log-softmaxes."""

    def log_softmax(x):
        top = jnp.max(x, axis=1, keepdims=True)
        t = jnp.where(x > -_INF, seal((x - top) * inv_t), -_INF)
        return t - log64(sum64(exp64(t)))[:, None]

    lp, lq = log_softmax(z), log_softmax(zp)
    p, q = exp64(lp), exp64(lq)
    only_p = jnp.any((z > -_INF) & (zp == -_INF), axis=1)
    only_q = jnp.any((z == -_INF) & (zp > -_INF), axis=1)
    kl_pq = sum64(jnp.where(p > 0, seal(p * (lp - lq)), 0.0))
    kl_qp = sum64(jnp.where(q > 0, seal(q * (lq - lp)), 0.0))
    tv = sum64(jnp.abs(p - q)) * 0.5
    kl_pq = jnp.where(only_p, _INF, jnp.maximum(0.0, kl_pq))
    kl_qp = jnp.where(only_q, _INF, jnp.maximum(0.0, kl_qp))
    return tv, kl_pq, kl_qp, lp - lq


def _columns(z32, zp32, y, inv_t) -> Float[Array, "rows columns"]:
    """Every column of ``MEASURED_COLUMNS`` for a block of rows, stacked, as float32."""
    z, zp = widen(z32), widen(zp32)
    nan_row = jnp.any(jnp.isnan(z) | jnp.isnan(zp), axis=1)
    zmax, zpmax = jnp.max(z, axis=1), jnp.max(zp, axis=1)
    i1, j1 = _first_argmax(z, zmax), _first_argmax(zp, zpmax)
    iota = lax.broadcasted_iota(jnp.int32, z.shape, 1)
    runner_up = jnp.max(jnp.where(iota == i1[:, None], -_INF, z), axis=1)

    d = jnp.where(z == zp, 0.0, zp - z)  # ±inf where one kernel alone masks the token
    pivot = _take(d, i1)
    pivot = jnp.where(jnp.isfinite(pivot), pivot, 0.0)
    w = d - pivot[:, None]
    w_fin = jnp.where(jnp.isfinite(w), w, 0.0)

    t = jnp.where(z > -_INF, seal((z - zmax[:, None]) * inv_t), -_INF)  # a − max a
    e = exp64(t)
    s = sum64(e)
    s_low = sum64(jnp.where(t < 0, e, 0.0))
    c = seal(sum64(seal(e * w_fin)) / s * inv_t)
    u = seal(w_fin * inv_t) - c[:, None]

    eu = seal(e * u)
    ephi = seal(e * phi64(u))
    kl_pq = log1p64(sum64(ephi) / s)
    k1, k2 = exp64(-kl_pq), expm1_64(-kl_pq)
    epsi = ephi + eu  # e·ψ(u), ψ = e^u − 1
    tv = sum64(jnp.maximum(0.0, -(seal(epsi * k1[:, None]) + seal(e * k2[:, None])))) / s
    jeffreys = sum64(seal(epsi * u)) / s
    kl_qp = jnp.maximum(0.0, seal(jeffreys * k1) - kl_pq)
    log_ratio = kl_pq - _take(u, y)

    extreme = jnp.max(u, axis=1) > EXTREME_U
    one_sided = jnp.any((z == -_INF) != (zp == -_INF), axis=1)
    fast = (tv, kl_pq, kl_qp, log_ratio)
    slow = lax.cond(
        jnp.any(extreme & ~one_sided),
        lambda: _take_rows(_log_domain(t, s, u), y),
        lambda: fast,
    )
    direct = lax.cond(
        jnp.any(one_sided), lambda: _take_rows(_one_sided(z, zp, inv_t), y), lambda: fast
    )
    tv, kl_pq, kl_qp, log_ratio = (
        jnp.where(one_sided, b, jnp.where(extreme, a, f))
        for f, a, b in zip(fast, slow, direct, strict=True)
    )
    both_masked = (_take(z, y) == -_INF) & (_take(zp, y) == -_INF)
    log_ratio = jnp.where(both_masked, _NAN, log_ratio)

    n = jnp.round(s - s_low)  # logits at the maximum (e = 1): an integer
    log_s = log64(n) + log1p64(s_low / n)
    ez = sum64(jnp.where(e > 0, seal(e * (z - zmax[:, None])), 0.0))
    entropy = log_s - seal(ez * inv_t) / s
    columns = {
        "logit_drift": jnp.max(jnp.abs(d), axis=1),
        "logit_oscillation": jnp.max(d, axis=1) - jnp.min(d, axis=1),
        "tv": jnp.minimum(1.0, tv),
        "kl_train_inf": kl_pq,
        "kl_inf_train": kl_qp,
        "log_ratio": log_ratio,
        "top1_flip": jnp.where(i1 != j1, 1.0, 0.0),
        "margin": zmax - runner_up,
        "entropy": entropy,
        "token_prob": _take(e, y) / s,
    }
    divergence = ("tv", "kl_train_inf", "kl_inf_train", "log_ratio", "entropy", "token_prob")
    no_mass = nan_row | ~jnp.isfinite(zmax)
    table = jnp.stack(
        [
            jnp.where(no_mass, _NAN, columns[k]) if k in divergence else columns[k]
            for k in MEASURED_COLUMNS
        ],
        axis=1,
    )
    return to_float32(table)


def _take_rows(values, y):
    """The log-ratio of the observed token from a path's per-logit log π/π'."""
    tv, kl_pq, kl_qp, ratio = values
    return tv, kl_pq, kl_qp, _take(ratio, y)


@functools.cache
def _program():
    return jax.jit(_columns)


def measure_rows(
    z_train: Float[np.ndarray, "tokens vocab"],
    z_inf: Float[np.ndarray, "tokens vocab"],
    tokens: Int[np.ndarray, " tokens"],
    temperature: float,
) -> Float[np.ndarray, "tokens columns"]:
    """The columns of ``MEASURED_COLUMNS`` for every row, [tokens, len(columns)] float32, the
    same bits on every backend. The inputs are checked by the caller
    (``kernels.measurement._measure.measure``)."""
    z_train = np.asarray(z_train, np.float32)
    z_inf = np.asarray(z_inf, np.float32)
    tokens = np.asarray(tokens, np.int32)
    n = z_train.shape[0]
    inv_t = np.float64(1.0) / np.float64(temperature)  # correctly rounded on the host
    table = np.empty((n, len(MEASURED_COLUMNS)), np.float32)
    program = _program()
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        pad = BLOCK - (stop - start)
        block = [x[start:stop] for x in (z_train, z_inf, tokens)]
        if pad:
            block = [np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]) for x in block]
        with jax.enable_x64(True):
            out = program(*block, jnp.float64(inv_t))
        table[start:stop] = np.asarray(out)[: stop - start]
    return table
