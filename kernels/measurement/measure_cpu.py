"""Full-vocabulary measurement on the CPU: the fused pass of ``kernels.measurement.measure_fused``
as one loop nest per row compiled by Numba, the row kept in the core's cache between its sweeps.

XLA's CPU code runs every reduction of the fused pass as its own loop over an array written for
it (eight such arrays per row block), which holds the JAX pass to about a seventh of the memory's
read bandwidth. Here each row is read from memory once and swept three more times while it sits
in the core's L2 cache:

1. the largest key (below) of z and of z' in each block of 256 logits; then, inside the winning
   blocks only, the first index i₁ of the maximum of z, its runner-up and the first argmax of z';
2. e = exp((z − max z)/T) (a vectorised exponential, below), S = Σ e and its part below the
   maximum (for log S, see ``kernels.measurement.measure_fused``), Σ e·(z − max z)/T, and the
   centred drift w = d − d(i₁) (d = z' − z) from float64 differences, whose rounding (2⁻⁵³ of
   the logits) stands in for the JAX pass's two-sum, with Σ e·w, max w, min w;
3. with c = Σ e·w/(S·T) and u = w/T − c: Σ e·φ(u), φ(u) = e^u − 1 − u, by the shortest series
   that holds every |u| of the row (5 terms below 1/16, the JAX pass's 9 below ½), otherwise
   one polynomial per logit (``_phi_any``: the exponential's polynomial without its first two
   terms where |u| ≤ ln2/2, 2^k·e^r − 1 − u beyond);
4. with KL(π‖π') = log1p(Σ e·φ/S): Σ (−(eψ·e^{−KL} + e·expm1(−KL)))₊ (TV) and Σ eψ·u (Jeffreys),
   ψ = φ + u.

The formulas are those of the JAX pass (see ``kernels.measurement.measure_fused``); rows it would
send to the log domain (u above ``EXTREME_U``, −inf on one side only), rows with a NaN and rows with
no finite maximum are flagged for the caller to recompute on the JAX path.

Rows run in parallel over Numba's threads. Float sums may be reassociated, so that they
vectorise; no other fast-math assumption is made (−inf and NaN keep their meaning). Float maxima
do not vectorise: they are taken over int32 keys that order as the floats do. This module is
the project's only importer of Numba.
"""

from __future__ import annotations

import math
import threading

import numba
import numpy as np
from jaxtyping import Bool, Float, Int
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from kernel_contracts.kernels.measurement.measure_fused import EXTREME_U, SERIES_BELOW

__all__ = ["SHORT_BELOW", "measure_rows"]

# float sums may be reassociated (so they vectorise); no assumption about NaN or infinities
_FLAGS = {"reassoc", "nsz", "contract", "arcp"}
# numpy's error model: a division by zero gives inf or NaN (a row without mass), never raises
_JIT = {
    "fastmath": _FLAGS,
    "error_model": "numpy",
    "boundscheck": False,
    "cache": True,
    "nogil": True,
}

_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)  # ln 2 split so that k·LN2_HI is exact for |k| < 2¹²
_LN2_LO = np.float32(-2.12194440e-4)
_EXP_LO = np.float32(-87.0)  # e^x below this is taken as 0 (smallest normal float32: e^−87.3)
_EXP_HI = np.float32(88.0)
# 1/k! for the degree-7 Taylor polynomial of e^r on |r| ≤ ln2/2 (relative error < 3e-8)
_P = tuple(np.float32(1.0 / math.factorial(k)) for k in range(8))
_INV_FACT = tuple(np.float32(1.0 / math.factorial(k)) for k in range(2, 11))
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_NEG_INF = np.float32(-np.inf)
_SERIES_BELOW = np.float32(SERIES_BELOW)
_EXTREME_U = np.float32(EXTREME_U)
SHORT_BELOW = 1.0 / 16.0  # |u| below which five terms of φ's series suffice
_SHORT_BELOW = np.float32(SHORT_BELOW)


@intrinsic
def _as_float(typingctx, bits):
    """The float32 whose bit pattern is the int32 ``bits``."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@intrinsic
def _as_int(typingctx, value):
    """The int32 bit pattern of the float32 ``value``."""
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@njit(**_JIT)
def _key(x):
    """An int32 that orders as the float32 ``x`` does (−NaN lowest, then −inf, …, +inf, +NaN;
    −0 and 0 share one key, as they compare equal): integer maxima vectorise where float maxima
    do not."""
    bits = _as_int(x)
    sign = bits >> np.int32(31)
    # exact in 32 bits; the cast keeps the compiler's vectors 32-bit (Numba computes in 64)
    return np.int32((bits ^ (sign & np.int32(0x7FFFFFFF))) - sign)


@njit(**_JIT)
def _unkey(k):
    """The float32 of a key (+0 for the key of ±0)."""
    sign = k >> np.int32(31)
    return _as_float(np.int32((k + sign) ^ (sign & np.int32(0x7FFFFFFF))))


def _key_of(x: float) -> np.int32:
    bits = int(np.array(x, np.float32).view(np.int32))
    sign = -1 if bits < 0 else 0
    return np.int32((bits ^ (sign & 0x7FFFFFFF)) - sign)


_KEY_NEG_INF = _key_of(-np.inf)
_KEY_POS_INF = _key_of(np.inf)
_LOWEST = np.int32(-(2**31))
_HIGHEST = np.int32(2**31 - 1)
_BLOCK = 256  # logits per block of the maxima sweep


@njit(**_JIT)
def _scale(k):
    """2^k for an integer-valued float32 k in [−126, 127]."""
    return _as_float((np.int32(k) + np.int32(127)) << np.int32(23))


@njit(**_JIT)
def _tail(r):
    """(e^r − 1 − r)/r² on |r| ≤ ln2/2: the degree-7 Taylor polynomial of e^r from its r² term,
    in Horner form (the part ``_poly`` and ``_phi_any`` share)."""
    p = _P[7]
    p = p * r + _P[6]
    p = p * r + _P[5]
    p = p * r + _P[4]
    p = p * r + _P[3]
    return p * r + _P[2]


@njit(**_JIT)
def _poly(r):
    """e^r on |r| ≤ ln2/2: the degree-7 Taylor polynomial (relative error below 3e-8)."""
    return (_tail(r) * r + _P[1]) * r + _P[0]


@njit(**_JIT)
def _exp_neg(x):
    """e^x in float32 for x ≤ 0 (0 below −87, so −inf gives 0), written so that the compiler
    vectorises it: x = k·ln 2 + r with |r| ≤ ln2/2, e^r by its polynomial, 2^k from the bits."""
    xc = x if x > _EXP_LO else _EXP_LO
    k = np.float32(np.int32(xc * _LOG2E - _HALF))  # nearest integer (y ≤ 0: truncation rounds up)
    r = (xc - k * _LN2_HI) - k * _LN2_LO
    return _poly(r) * _scale(k) if x > _EXP_LO else _ZERO


@njit(**_JIT)
def _phi_any(u):
    """φ(u) = e^u − 1 − u for any u ≤ 88 with one polynomial: u = k·ln 2 + r as in ``_exp_neg``,
    and q(r) = e^r − 1 − r from the exponential's polynomial (its terms from r² on). Where
    k = 0 (|u| ≤ ln2/2) φ = q(u), to a relative 2e-7; elsewhere 2^k·(1 + r + q(r)) − 1 − u,
    whose rounding is at most about 20 float32 roundings of φ (at |u| just above ln2/2)."""
    uc = u if u < _EXP_HI else _EXP_HI
    uc = uc if uc > _EXP_LO else _EXP_LO
    y = uc * _LOG2E
    k = np.float32(np.int32(y + _HALF if y >= _ZERO else y - _HALF))
    r = (uc - k * _LN2_HI) - k * _LN2_LO
    q = _tail(r) * r * r
    return q if k == _ZERO else (_scale(k) * ((_ONE + r) + q) - _ONE) - u


@njit(**_JIT)
def _phi(u):
    """φ(u) = e^u − 1 − u as its series for |u| < ½: the terms of ``phi_series``."""
    acc = _INV_FACT[8]
    acc = _INV_FACT[7] + u * acc
    acc = _INV_FACT[6] + u * acc
    acc = _INV_FACT[5] + u * acc
    return _phi_short(u, acc)


@njit(**_JIT)
def _phi_short(u, acc=_ZERO):
    """φ(u) by its first five terms (plus ``acc``·u⁵, the rest): alone, to a relative 4e-10 for
    |u| < ``SHORT_BELOW``."""
    acc = _INV_FACT[4] + u * acc
    acc = _INV_FACT[3] + u * acc
    acc = _INV_FACT[2] + u * acc
    acc = _INV_FACT[1] + u * acc
    acc = _INV_FACT[0] + u * acc
    return u * u * acc


@njit(**_JIT)
def _span_maxima(a, ap, start, stop):
    """The largest keys of ``a[start:stop]`` and ``ap[start:stop]``, and the smallest of both."""
    top = _LOWEST
    top_p = _LOWEST
    low = _HIGHEST
    for j in range(start, stop):
        k = _key(a[j])
        kp = _key(ap[j])
        top = k if k > top else top
        top_p = kp if kp > top_p else top_p
        least = k if k < kp else kp
        low = least if least < low else low
    return top, top_p, low


@njit(**_JIT)
def _block_maxima(a, ap, tops, tops_p):
    """The largest key of each block of ``_BLOCK`` logits of ``a`` and of ``ap`` (one sweep, the
    row's one read from memory), and the least key of both (a −NaN lies below −inf)."""
    vocab = a.shape[0]
    full = vocab // _BLOCK
    low = _HIGHEST
    for b in range(full):
        # the body of ``_span_maxima`` written out over a constant trip count: called with
        # (start, start + _BLOCK) the compiler does not vectorise it (measured 2x slower)
        base = b * _BLOCK
        top = _LOWEST
        top_p = _LOWEST
        for j in range(_BLOCK):
            k = _key(a[base + j])
            kp = _key(ap[base + j])
            top = k if k > top else top
            top_p = kp if kp > top_p else top_p
            least = k if k < kp else kp
            low = least if least < low else low
        tops[b] = top
        tops_p[b] = top_p
    if full < tops.shape[0]:
        top, top_p, least = _span_maxima(a, ap, full * _BLOCK, vocab)
        tops[full] = top
        tops_p[full] = top_p
        low = least if least < low else low
    return low


@njit(**_JIT)
def _first_block(tops):
    top = tops[0]
    for b in range(1, tops.shape[0]):
        top = tops[b] if tops[b] > top else top
    for b in range(tops.shape[0]):
        if tops[b] == top:
            return top, b
    return top, 0


@njit(**_JIT)
def _first_index(a, b, top):
    for j in range(b * _BLOCK, min(a.shape[0], (b + 1) * _BLOCK)):
        if _key(a[j]) == top:
            return j
    return b * _BLOCK


@njit(**_JIT)
def _maxima(a, ap, tops, tops_p):
    """Of ``a``: the maximum, its first index and the runner-up (the largest logit at another
    index: the maximum again under a tie); of ``ap``: the first index of its maximum; and
    whether either holds a NaN. One sweep over the row, then only the winning blocks."""
    low = _block_maxima(a, ap, tops, tops_p)
    top, b1 = _first_block(tops)
    i1 = _first_index(a, b1, top)
    runner = _KEY_NEG_INF
    for b in range(tops.shape[0]):
        if b != b1:
            runner = tops[b] if tops[b] > runner else runner
    for j in range(b1 * _BLOCK, min(a.shape[0], (b1 + 1) * _BLOCK)):
        k = _key(a[j])
        if j != i1 and k > runner:
            runner = k
    top_p, b1_p = _first_block(tops_p)
    nan = (top > _KEY_POS_INF) | (top_p > _KEY_POS_INF) | (low < _KEY_NEG_INF)
    return _unkey(top), i1, _unkey(runner), _first_index(ap, b1_p, top_p), nan


@njit(**_JIT)
def _row(z, zp, y, inv_t, out, e, w, ephi, tops, tops_p):
    """Every column of one row into ``out`` (``COLUMNS`` order, then 1 where the row must be
    recomputed on the JAX path); ``e``, ``w``, ``ephi``, ``tops``, ``tops_p``: scratch."""
    vocab = z.shape[0]
    zmax, i1, runner, j1, nan = _maxima(z, zp, tops, tops_p)

    a1, b1 = np.float64(z[i1]), np.float64(zp[i1])
    pivot = b1 - a1 if a1 != b1 else 0.0
    if not math.isfinite(pivot):
        pivot = 0.0
    zmax_t = zmax * inv_t

    # e = exp((z − max z)/T), w = d − d(i₁), Σ e, Σ e·w, Σ e·(z − max z)/T, max w, min w
    s = _ZERO
    s_low = _ZERO
    sw = _ZERO
    st = _ZERO
    w_hi = _LOWEST
    w_lo = _HIGHEST
    for j in range(vocab):
        a = z[j]
        b = zp[j]
        t = a * inv_t - zmax_t
        ej = _exp_neg(t)
        e[j] = ej
        d = np.float64(b) - np.float64(a) if a != b else 0.0
        wj = np.float32(d - pivot)
        w[j] = wj
        kw = _key(wj)
        w_hi = kw if kw > w_hi else w_hi
        w_lo = kw if kw < w_lo else w_lo
        s += ej
        s_low += ej if t < _ZERO else _ZERO
        sw += ej * wj
        st += ej * t if ej > _ZERO else _ZERO
    w_hi, w_lo = _unkey(w_hi), _unkey(w_lo)

    # Σ e·φ(u), u = w/T − c: the shortest series that holds every |u| of the row
    c = sw / s * inv_t
    u_hi = w_hi * inv_t - c
    u_lo = w_lo * inv_t - c
    total_phi = _ZERO
    if u_hi < _SHORT_BELOW and u_lo > -_SHORT_BELOW:
        for j in range(vocab):
            v = ephi[j] = e[j] * _phi_short(w[j] * inv_t - c)
            total_phi += v
    elif u_hi < _SERIES_BELOW and u_lo > -_SERIES_BELOW:
        for j in range(vocab):
            v = ephi[j] = e[j] * _phi(w[j] * inv_t - c)
            total_phi += v
    else:
        for j in range(vocab):
            v = ephi[j] = e[j] * _phi_any(w[j] * inv_t - c)
            total_phi += v
    kl_pq = np.float32(math.log1p(total_phi / s))
    k1 = np.float32(math.exp(-kl_pq))
    k2 = np.float32(math.expm1(-kl_pq))

    # TV = Σ (−(eψ·e^{−KL} + e·expm1(−KL)))₊ / S and Jeffreys Σ eψ·u / S, eψ = eφ + e·u
    tv = _ZERO
    jeffreys = _ZERO
    for j in range(vocab):
        u = w[j] * inv_t - c
        epsi = ephi[j] + e[j] * u
        tv += max(_ZERO, -(epsi * k1 + e[j] * k2))
        jeffreys += epsi * u
    tv = tv / s
    jeffreys = jeffreys / s

    extreme = not (u_hi <= _EXTREME_U) or not (w_lo > _NEG_INF)
    out[0] = max(w_hi + np.float32(pivot), -(w_lo + np.float32(pivot)))
    out[1] = w_hi - w_lo
    out[2] = min(_ONE, tv)
    out[3] = kl_pq
    out[4] = max(_ZERO, jeffreys * k1 - kl_pq)
    out[5] = kl_pq - (w[y] * inv_t - c)
    out[6] = _ONE if i1 != j1 else _ZERO
    out[7] = zmax - runner
    n_top = round(s - s_low)  # logits at the maximum: log S = log n + log1p(S₋/n) keeps S₋
    out[8] = np.float32(math.log(n_top) + math.log1p(s_low / n_top)) - st / s
    out[9] = e[y] / s
    out[10] = _ONE if nan or extreme or not math.isfinite(zmax) else _ZERO
    if z[y] == _NEG_INF and zp[y] == _NEG_INF:
        out[5] = np.float32(np.nan)


@njit(parallel=True, **_JIT)
def _rows(z, zp, y, inv_t, out, chunks):
    n, vocab = z.shape
    per = (n + chunks - 1) // chunks
    blocks = (vocab + _BLOCK - 1) // _BLOCK
    for k in prange(chunks):
        e = np.empty(vocab, np.float32)
        w = np.empty(vocab, np.float32)
        ephi = np.empty(vocab, np.float32)
        tops = np.empty(blocks, np.int32)
        tops_p = np.empty(blocks, np.int32)
        for i in range(k * per, min(n, (k + 1) * per)):
            _row(z[i], zp[i], y[i], inv_t, out[i], e, w, ephi, tops, tops_p)


# one call at a time: Numba's portable thread pool (its fallback where no OpenMP or TBB runtime
# is found) aborts the process when two threads launch parallel work at once
_LAUNCH = threading.Lock()


def measure_rows(
    z_train: Float[np.ndarray, "rows vocab"],
    z_inf: Float[np.ndarray, "rows vocab"],
    tokens: Int[np.ndarray, " rows"],
    inv_t: float | np.floating,
) -> tuple[Float[np.ndarray, "rows 10"], Bool[np.ndarray, " rows"]]:
    """The columns of ``kernels.measurement._measure.COLUMNS`` for every row (temperature
    1/``inv_t``), as a float32 table, and the mask of rows the caller must recompute on the JAX
    path."""
    z = np.ascontiguousarray(z_train, np.float32)
    zp = np.ascontiguousarray(z_inf, np.float32)
    y = np.ascontiguousarray(tokens, np.int64)
    out = np.empty((z.shape[0], 11), np.float32)
    chunks = max(1, min(z.shape[0], 8 * numba.get_num_threads()))
    with _LAUNCH:
        _rows(z, zp, y, np.float32(inv_t), out, chunks)
    return out[:, :10], out[:, 10] != 0
