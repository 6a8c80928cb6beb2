"""Full-vocabulary, per-token divergence between the two kernels' logits, in JAX.

For each token, with z the K_train logits, z' the K_inf logits, Δ = z' − z, T the sampling
temperature, π = softmax(z/T), π' = softmax(z'/T) and y the observed token:

========================  ==========================================================
``logit_drift``           ‖Δ‖∞
``logit_oscillation``     max Δ − min Δ
``tv``                    ½ Σ |π − π'|
``kl_train_inf``          KL(π ‖ π')
``kl_inf_train``          KL(π' ‖ π)
``log_ratio``             log π(y) − log π'(y)
``top1_flip``             1 if argmax z ≠ argmax z' else 0
``margin``                top-1 minus top-2 logit of z
``entropy``               entropy of π (nats)
``token_prob``            π(y)
========================  ==========================================================

The divergences are computed from d = (Δ − Δ_top)/T (Δ_top: the drift of the most likely token;
every divergence is invariant to that shift) rather than from the difference of two rounded
probability vectors, so they keep their relative accuracy when the drift is tiny (a float32
``Σ|π − π'|`` is all rounding noise once ‖Δ‖∞ < 1e-6). With c = E_π[d] and u = d − c:
KL(π‖π') = log E_π[e^u] − E_π[u] = log1p(E_π[φ(u)]) with φ(u) = e^u − 1 − u (a series near 0);
r = log π'/π = u − KL(π‖π'); TV = Σ π·(−expm1(r))₊; KL(π'‖π) = Σ (π' − π)·r − KL(π‖π').
Rows whose u exceeds 30 (where e^u or an underflowing π would lose mass) take a log-domain path.

Rows are processed in blocks (``lax.map``) so every pass over a block's vocabulary stays in
cache; with several devices the token axis is sharded across them (``jax.shard_map``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Float, Int

from kernels.columns import MEASURED_COLUMNS

__all__ = ["COLUMNS", "TRACES", "measure", "measure_numpy"]

COLUMNS = MEASURED_COLUMNS

# how many times each jitted measurement function has been traced (a retrace detector)
TRACES: dict[str, int] = {"measure": 0}

_SERIES_BELOW = 0.1  # |u| below which φ(u) = e^u − 1 − u is summed as a series


def _phi(u):
    """e^u − 1 − u, accurate relative to itself for every u (it is ≥ 0)."""
    series = u * u * (0.5 + u * (1 / 6 + u * (1 / 24 + u * (1 / 120 + u * (1 / 720 + u / 5040)))))
    safe = jnp.where(jnp.abs(u) < _SERIES_BELOW, 1.0, u)  # keep the unused branch finite
    return jnp.where(jnp.abs(u) < _SERIES_BELOW, series, jnp.expm1(safe) - safe)


def _log_mean_exp_centred(lp, p, u):
    """log E_p[e^u] for E_p[u] = 0 (Hoeffding's quantity), from log p, p and u.

    It is log(1 + Σ p·φ(u)). Terms with u ≤ 1 use p·φ(u) (accurate however small); terms with
    u > 1 use e^{log p + u} − p(1 + u), which stays finite where p underflows or e^u overflows;
    a common shift e^{−m} keeps the sum finite.
    """
    big = u > 1.0
    x = jnp.where(big, lp + u, -jnp.inf)  # log(p e^u) of the large terms
    m = jnp.maximum(0.0, jnp.max(x))
    shift = jnp.exp(-m)
    small_terms = p * _phi(jnp.where(big, 0.0, u)) * shift
    big_terms = jnp.exp(x - m) - p * (1.0 + jnp.where(big, u, 0.0)) * shift
    total = jnp.sum(jnp.where(big, big_terms, small_terms))
    return jnp.where(m > 0, m + jnp.log(shift + total), jnp.log1p(total))


_FAST_BELOW = 30.0  # rows whose centred drift u stays below this take the fast path


def _first_max(x, iota):
    """``argmax(x)`` (first index of the maximum) as two plain reductions, which XLA's CPU
    backend runs several times faster than its variadic argmax reduction."""
    return jnp.min(jnp.where(x == jnp.max(x), iota, x.shape[0]))


def _stats(z, zp, y, inv_t):
    """Per-row scalars: the non-divergence columns, and what the divergence paths need."""
    delta = zp - z
    hi, lo = jnp.max(delta), jnp.min(delta)
    iota = jnp.arange(z.shape[0])
    i1 = _first_max(z, iota)
    top = z[i1] * inv_t  # = max(z · inv_t): rounding is monotone
    a = z * inv_t - top
    e = jnp.exp(a)
    s = jnp.sum(e)
    p = e / s
    # every divergence is invariant to a constant shift of Δ: measure it from the Δ of the most
    # likely token, so a constant Δ gives exact zeros and a Δ that is mostly 0 stays exact
    pivot = zp[i1] - z[i1]  # gathers read the inputs: a gather of a computed row would
    # force XLA to write that row out instead of fusing it into the reductions
    c = jnp.sum(p * ((delta - pivot) * inv_t))  # E_π[d]; its rounding enters only squared
    masked = jnp.where(iota == i1, -jnp.inf, z)
    return {
        "top": top,
        "log_s": jnp.log(s),
        "pivot": pivot,
        "c": c,
        "max_u": (hi - pivot) * inv_t - c,
        "logit_drift": jnp.maximum(hi, -lo),
        "logit_oscillation": hi - lo,
        "entropy": jnp.log(s) - jnp.sum(p * a),
        "token_prob": jnp.exp(z[y] * inv_t - top) / s,
        "margin": z[i1] - jnp.max(masked),
        "top1_flip": (i1 != _first_max(zp, iota)).astype(jnp.float32),
    }


def _dist(z, zp, st, inv_t):
    """log π, π and the centred drift u = d − E_π[d], recomputed elementwise (fused)."""
    lp = z * inv_t - st["top"] - st["log_s"]
    u = ((zp - z) - st["pivot"]) * inv_t - st["c"]
    return lp, jnp.exp(lp), u


def _fast(z, zp, y, st, inv_t):
    """Two transcendentals per logit: π = e^{log π} and ψ = expm1(u).

    KL(π‖π') = log1p(Σ π φ(u)); expm1(r) = ψ e^{−KL} + expm1(−KL) with r = u − KL = log π'/π;
    TV = Σ π (−expm1(r))₊; KL(π'‖π) = Σ (π' − π)(log π' − log π) − KL(π‖π') (Jeffreys).
    Valid while u ≤ 30: a π that underflows then hides at most e^{−87+30} of π'.
    """
    _, p, u = _dist(z, zp, st, inv_t)
    psi = jnp.expm1(u)
    series = u * u * (0.5 + u * (1 / 6 + u * (1 / 24 + u * (1 / 120 + u * (1 / 720 + u / 5040)))))
    phi = jnp.where(jnp.abs(u) < _SERIES_BELOW, series, psi - u)
    kl_pq = jnp.log1p(jnp.sum(p * phi))
    g = psi * jnp.exp(-kl_pq) + jnp.expm1(-kl_pq)
    r = u - kl_pq
    tv = jnp.minimum(1.0, jnp.sum(p * jnp.maximum(0.0, -g)))
    kl_qp = jnp.maximum(0.0, jnp.sum(p * g * r) - kl_pq)
    return {
        "tv": tv,
        "kl_train_inf": kl_pq,
        "kl_inf_train": kl_qp,
        "log_ratio": kl_pq - _u_at(z, zp, y, st, inv_t),
    }


def _u_at(z, zp, y, st, inv_t):
    """u at the observed token, from the inputs (see ``_stats`` on gathers)."""
    return ((zp[y] - z[y]) - st["pivot"]) * inv_t - st["c"]


def _robust(z, zp, y, st, inv_t):
    """Log-domain twin of ``_fast`` for rows with large drift (no overflow, no lost mass)."""
    lp, p, u = _dist(z, zp, st, inv_t)
    kl_pq = _log_mean_exp_centred(lp, p, u)
    r = u - kl_pq  # log π' − log π
    lq = lp + r
    q = jnp.exp(lq)
    tv = jnp.minimum(1.0, jnp.sum(p * jnp.maximum(0.0, -jnp.expm1(r))))
    c_q = jnp.sum(q * r)
    c_q = c_q + jnp.sum(q * (r - c_q))
    kl_qp = _log_mean_exp_centred(lq, q, c_q - r)
    return {"tv": tv, "kl_train_inf": kl_pq, "kl_inf_train": kl_qp, "log_ratio": -r[y]}


_KEEP = ("logit_drift", "logit_oscillation", "entropy", "token_prob", "margin", "top1_flip")


_DIVERGENCES = ("tv", "kl_train_inf", "kl_inf_train", "log_ratio")


def _rows(path, z, zp, y, inv_t):
    st = jax.vmap(_stats, in_axes=(0, 0, 0, None))(z, zp, y, inv_t)
    div = jax.vmap(path, in_axes=(0, 0, 0, 0, None))(z, zp, y, st, inv_t)
    return {**{k: st[k] for k in _KEEP}, **div, "extreme": st["max_u"] > _FAST_BELOW}


def _block_metrics(z, zp, y, inv_t, block: int):
    """One fused pass over blocks of rows on the fast path; only when some row is extreme, a
    second pass on the log-domain path, whose values replace the fast ones on those rows."""
    n, vocab = z.shape
    pad = (-n) % block
    if pad:
        z = jnp.pad(z, ((0, pad), (0, 0)))
        zp = jnp.pad(zp, ((0, pad), (0, 0)))
        y = jnp.pad(y, (0, pad))
    shaped = (z.reshape(-1, block, vocab), zp.reshape(-1, block, vocab), y.reshape(-1, block))
    out = jax.lax.map(lambda args: _rows(_fast, *args, inv_t), shaped)
    extreme = out.pop("extreme")

    def redo(fast):
        slow = jax.lax.map(lambda args: _rows(_robust, *args, inv_t), shaped)
        return {k: jnp.where(extreme, slow[k], fast[k]) for k in _DIVERGENCES}

    fast = {k: out[k] for k in _DIVERGENCES}
    out.update(jax.lax.cond(jnp.any(extreme), redo, lambda fast: fast, fast))
    return {k: v.reshape(-1)[:n] for k, v in out.items()}


@functools.cache
def _compiled(devices: tuple, block: int):
    def run(z, zp, y, inv_t):
        TRACES["measure"] += 1
        return _block_metrics(z, zp, y, inv_t, block)

    if len(devices) == 1:
        return jax.jit(run)
    mesh = Mesh(np.array(devices), ("tokens",))
    rows, rep = PartitionSpec("tokens"), PartitionSpec()
    sharded = jax.shard_map(
        run, mesh=mesh, in_specs=(rows, rows, rows, rep), out_specs=rows, check_vma=False
    )
    shard = NamedSharding(mesh, rows)
    return jax.jit(
        sharded,
        in_shardings=(shard, shard, shard, NamedSharding(mesh, rep)),
        out_shardings=shard,
    )


def measure(
    z_train: Float[Array, "tokens vocab"],
    z_inf: Float[Array, "tokens vocab"],
    tokens: Int[Array, " tokens"],
    temperature: float = 1.0,
    *,
    devices=None,
    block: int = 8,
) -> dict[str, Float[Array, " tokens"]]:
    """Per-token metrics (``COLUMNS``) of two kernels' logits for the same positions.

    ``devices``: the devices to shard the token axis over (default: all local devices).
    Shapes and ``block`` select the compiled program; the temperature is a traced argument,
    so new temperatures do not recompile.
    """
    z_train = jnp.asarray(z_train, jnp.float32)
    z_inf = jnp.asarray(z_inf, jnp.float32)
    tokens = jnp.asarray(tokens, jnp.int32)
    if z_train.ndim != 2 or z_train.shape != z_inf.shape or tokens.shape != z_train.shape[:1]:
        raise ValueError(
            f"expected z_train and z_inf [tokens, vocab] and tokens [tokens]; got "
            f"{z_train.shape}, {z_inf.shape}, {tokens.shape}"
        )
    if not (temperature > 0 and np.isfinite(temperature)):
        raise ValueError(f"temperature must be positive and finite, got {temperature}")
    vocab = z_train.shape[1]
    if vocab < 1:
        raise ValueError("the vocabulary is empty")
    if not isinstance(tokens, jax.core.Tracer) and tokens.size:
        lo, hi = int(jnp.min(tokens)), int(jnp.max(tokens))
        if lo < 0 or hi >= vocab:
            raise ValueError(f"token ids must lie in [0, {vocab}), got [{lo}, {hi}]")
    if z_train.shape[0] == 0:
        return {k: jnp.zeros((0,), jnp.float32) for k in COLUMNS}
    devices = tuple(jax.local_devices() if devices is None else devices)
    n = z_train.shape[0]
    pad = (-n) % len(devices)
    if pad:
        z_train = jnp.pad(z_train, ((0, pad), (0, 0)))
        z_inf = jnp.pad(z_inf, ((0, pad), (0, 0)))
        tokens = jnp.pad(tokens, (0, pad))
    out = _compiled(devices, block)(z_train, z_inf, tokens, jnp.float32(1.0 / temperature))
    return {k: v[:n] for k, v in out.items()} if pad else out


def measure_numpy(z_train, z_inf, tokens, temperature: float = 1.0, dtype=np.float64):
    """The same columns computed the straightforward way in numpy (the reference)."""
    z = np.asarray(z_train, dtype)
    zp = np.asarray(z_inf, dtype)
    y = np.asarray(tokens, np.int64)
    rows = np.arange(len(y))
    delta = zp - z

    def log_softmax(x):
        x = x / dtype(temperature)
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

    lp, lq = log_softmax(z), log_softmax(zp)
    p, q = np.exp(lp), np.exp(lq)
    top2 = np.sort(z, axis=1)[:, -2:]
    return {
        "logit_drift": np.abs(delta).max(axis=1),
        "logit_oscillation": delta.max(axis=1) - delta.min(axis=1),
        "tv": 0.5 * np.abs(p - q).sum(axis=1),
        "kl_train_inf": (p * (lp - lq)).sum(axis=1),
        "kl_inf_train": (q * (lq - lp)).sum(axis=1),
        "log_ratio": lp[rows, y] - lq[rows, y],
        "top1_flip": (z.argmax(axis=1) != zp.argmax(axis=1)).astype(dtype),
        "margin": top2[:, 1] - top2[:, 0],
        "entropy": -(p * lp).sum(axis=1),
        "token_prob": p[rows, y],
    }
