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
KL(π‖π') = log E_π[e^u] = log1p(E_π[φ(u)]) with φ(u) = e^u − 1 − u (a series near 0);
r = log π'/π = u − KL(π‖π'); TV = Σ π·(−expm1(r))₊; KL(π'‖π) = E_π[(e^u − 1)·u]·e^{−KL(π‖π')}
− KL(π‖π'). ``kernels.measurement.measure_fused`` computes them in one fused pass over a block of
rows, one exponential per pair of logits where every |u| of the block is below ½, two otherwise.
Rows whose u exceeds 30 (where e^u or an underflowing π would lose mass) take a log-domain path, as
do rows where one kernel alone gives a token −inf.

Logits may be −inf (a masked token): a token masked by both kernels drops out of every column
(its Δ counts as 0); masked by one kernel only, it makes Δ infinite and the KL divergence
towards the masking kernel +inf, and its TV share is its whole probability. ``log_ratio`` is
NaN when both kernels mask the observed token. A row whose logits are all −inf has no
distribution: its divergences are NaN.

Two paths compute the same formulas. The XLA program (``impl="jax"``) processes rows in blocks
(a loop over row blocks, each block's vocabulary in cache); it runs inside a caller's ``jax.jit``
and, with several devices, shards the token axis across them (``jax.shard_map``). On a machine
whose one device is a CPU, arrays take the host pass (``impl="cpu"``,
``kernels.measurement.measure_cpu``): one loop nest per row compiled for the cores, which reads each
row from memory once where XLA's CPU code runs every reduction as its own loop (2.4-3 times faster
at 4096 x 32768).

A row's columns do not depend on the rows measured with it or on how many there are: the XLA
program always computes whole blocks (fewer rows than a block are padded with zero rows), and
the host pass computes each row on its own. The rows that the host pass or the Pallas kernel
leave to the XLA program are padded to a bucket (``redo_bucket``), so measuring batches of
varying composition compiles that program for a few row counts, not once per count.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, ArrayLike, Float, Int

from kernel_contracts.contracts.checks import check_temperature
from kernel_contracts.kernels.measurement.columns import MEASURED_COLUMNS
from kernel_contracts.kernels.measurement.measure_fused import (
    block_metrics,
    centred_drift,
    row_maxima,
)

__all__ = ["COLUMNS", "IMPLS", "TRACES", "measure", "measure_numpy", "redo_bucket"]

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


def _log_domain(z, zp, y, inv_t):
    """The divergence columns of one row in the log domain: no overflow, no lost mass, for any
    finite drift (the fast pass's derivation, with the log-mean-exp above)."""
    i1 = jnp.argmax(z)
    a = z * inv_t - z[i1] * inv_t
    lp = a - jnp.log(jnp.sum(jnp.exp(a)))
    p = jnp.exp(lp)
    d = centred_drift(z, zp, i1)[0] * inv_t
    c = jnp.sum(jnp.where(p > 0, p * d, 0.0))
    u = d - c
    kl_pq = _log_mean_exp_centred(lp, p, u)
    r = u - kl_pq  # log π' − log π
    lq = lp + r
    q = jnp.exp(lq)
    tv = jnp.minimum(1.0, jnp.sum(p * jnp.maximum(0.0, -jnp.expm1(r))))
    c_q = jnp.sum(q * r)
    c_q = c_q + jnp.sum(q * (r - c_q))
    kl_qp = _log_mean_exp_centred(lq, q, c_q - r)
    return {"tv": tv, "kl_train_inf": kl_pq, "kl_inf_train": kl_qp, "log_ratio": -r[y]}


def _one_sided(z, zp, y, inv_t):
    """The divergence columns of a row where one kernel alone masks some token (−inf): the KL
    divergence towards the masking kernel is +inf; the rest is summed directly from the two
    log-softmaxes (to about 1e-6 absolute, not relative to tiny divergences)."""
    lp = jax.nn.log_softmax(z * inv_t)
    lq = jax.nn.log_softmax(zp * inv_t)
    p, q = jnp.exp(lp), jnp.exp(lq)
    only_p = jnp.any((z > -jnp.inf) & (zp == -jnp.inf))
    only_q = jnp.any((z == -jnp.inf) & (zp > -jnp.inf))
    kl_pq = jnp.sum(jnp.where(p > 0, p * (lp - lq), 0.0))
    kl_qp = jnp.sum(jnp.where(q > 0, q * (lq - lp), 0.0))
    return {
        "tv": jnp.minimum(1.0, 0.5 * jnp.sum(jnp.abs(p - q))),
        "kl_train_inf": jnp.where(only_p, jnp.inf, jnp.maximum(0.0, kl_pq)),
        "kl_inf_train": jnp.where(only_q, jnp.inf, jnp.maximum(0.0, kl_qp)),
        "log_ratio": lp[y] - lq[y],
    }


_DIVERGENCES = ("tv", "kl_train_inf", "kl_inf_train", "log_ratio")


def _slow_rows(z, zp, y, inv_t):
    one_sided = jnp.any((z == -jnp.inf) != (zp == -jnp.inf), axis=1)
    log_domain = jax.vmap(_log_domain, in_axes=(0, 0, 0, None))(z, zp, y, inv_t)
    direct = jax.vmap(_one_sided, in_axes=(0, 0, 0, None))(z, zp, y, inv_t)
    return {k: jnp.where(one_sided, direct[k], log_domain[k]) for k in _DIVERGENCES}


def _block(z, zp, y, inv_t, start: int | Int[ArrayLike, ""], block: int, maxima=None):
    """Every column for rows [start, start + block), stacked [block, len(COLUMNS)]: the fused
    pass, and for a block with an extreme row the log-domain values on those rows. The slow
    path slices its rows itself, so the fast path reads the inputs without copying them."""
    rows = jax.lax.dynamic_slice_in_dim(z, start, block)
    rows_p = jax.lax.dynamic_slice_in_dim(zp, start, block)
    ys = jax.lax.dynamic_slice_in_dim(y, start, block)
    if maxima is not None:
        maxima = [jax.lax.dynamic_slice_in_dim(m, start, block) for m in maxima]
    out = block_metrics(rows, rows_p, ys, inv_t, maxima)
    extreme = out.pop("extreme")

    def redo(fast):
        again = [jax.lax.dynamic_slice_in_dim(x, start, block) for x in (z, zp, y)]
        slow = _slow_rows(*again, inv_t)
        return {k: jnp.where(extreme, slow[k], fast[k]) for k in _DIVERGENCES}

    fast = {k: out[k] for k in _DIVERGENCES}
    out.update(jax.lax.cond(jnp.any(extreme), redo, lambda fast: fast, fast))
    at = jnp.arange(block)
    masked = (rows[at, ys] == -jnp.inf) & (rows_p[at, ys] == -jnp.inf)
    out["log_ratio"] = jnp.where(masked, jnp.nan, out["log_ratio"])
    return jnp.stack([out[k] for k in COLUMNS], axis=1)


def _all_blocks(z, zp, y, inv_t, block: int):
    """``_block`` over row blocks [start, start + block). The last block starts at n − block
    (it may overlap the one before, whose rows it recomputes and rewrites with the same
    values), so no input is padded or copied."""
    n = z.shape[0]
    block = min(block, n)
    starts = -(-n // block)

    maxima = row_maxima(z, zp)  # one pass over all rows (its per-row steps then run once)

    def body(b, table):
        start = jnp.minimum(b * block, n - block)
        rows = _block(z, zp, y, inv_t, start, block, maxima)
        return jax.lax.dynamic_update_slice_in_dim(table, rows, start, 0)

    table = jnp.zeros((n, len(COLUMNS)), jnp.float32)
    table = jax.lax.fori_loop(0, starts, body, table)
    return {k: table[:, i] for i, k in enumerate(COLUMNS)}


# On CPU, 512-bit vectors make the fused loops (exponentials and a series per logit) about
# 20 % faster than XLA's default of 256 bits; other backends take no options.
_CPU_OPTIONS = {"xla_cpu_prefer_vector_width": 512}


@functools.cache
def _compiled(devices: tuple, block: int, nested: bool = False):
    """The measurement program; ``nested``: traced inside a caller's ``jax.jit``, whose
    compile options apply (a nested jit takes none)."""

    def run(z, zp, y, inv_t):
        TRACES["measure"] += 1
        return _all_blocks(z, zp, y, inv_t, block)

    cpu = all(d.platform == "cpu" for d in devices)
    options = _CPU_OPTIONS if cpu and not nested else None
    if len(devices) == 1:
        return jax.jit(run, compiler_options=options)
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
        compiler_options=options,
    )


IMPLS = ("auto", "jax", "cpu", "pallas", "portable")


def measure(
    z_train: Float[ArrayLike, "tokens vocab"],
    z_inf: Float[ArrayLike, "tokens vocab"],
    tokens: Int[ArrayLike, " tokens"],
    temperature: float = 1.0,
    *,
    devices=None,
    block: int = 8,
    impl: str = "auto",
) -> dict[str, Float[Array, " tokens"]]:
    """Per-token metrics (``COLUMNS``) of two kernels' logits for the same positions.

    ``impl``: ``"jax"`` runs the fused pass of ``kernels.measurement.measure_fused`` as one XLA
    program (jit-compatible; shards the token axis over ``devices``, default all local devices);
    ``"cpu"`` runs the same pass compiled for the host's cores (``kernels.measurement.measure_cpu``;
    arrays only, no tracers), recomputing on the JAX path the rows that it flags (log-domain rows,
    NaN, no finite maximum); ``"pallas"`` runs the chunked kernel of
    ``kernels.measurement.measure_pallas`` on the default device (compiled on a GPU, interpreted
    elsewhere; jit-compatible), its flagged rows recomputed on the JAX path likewise; ``"portable"``
    computes every column in binary64 from ``kernels.numerics.portable``'s parts
    (``kernels.measurement.measure_portable``; arrays only), the same bits on every backend and
    machine, several times slower; ``"auto"`` (default) takes ``"cpu"`` for arrays when the one
    device is a CPU, ``"pallas"`` when it is a GPU, ``"jax"`` for traced values on a CPU and for
    several devices (sharded). Shapes and ``block`` select the compiled JAX program; the temperature
    is a traced argument, so new temperatures do not recompile.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    traced = any(isinstance(x, jax.core.Tracer) for x in (z_train, z_inf, tokens))
    devices = tuple(jax.local_devices() if devices is None else devices)
    if impl in ("cpu", "portable") and traced:
        raise ValueError(f"impl={impl!r} measures arrays, not traced values: use impl='jax'")
    if impl == "portable":
        z_train, z_inf, tokens = (np.asarray(x) for x in (z_train, z_inf, tokens))
        _check(z_train, z_inf, tokens, temperature)
        from kernel_contracts.kernels.measurement.measure_portable import (
            measure_rows as portable_rows,
        )

        table = portable_rows(z_train, z_inf, tokens, temperature)
        return {k: jnp.asarray(table[:, i]) for i, k in enumerate(COLUMNS)}
    one = devices[0].platform if len(devices) == 1 else None
    if impl == "pallas" or (impl == "auto" and one == "gpu"):
        return _measure_pallas(z_train, z_inf, tokens, temperature, devices, block, traced)
    host = impl == "cpu" or (impl == "auto" and not traced and one == "cpu")
    if not host:
        return _measure_jax(z_train, z_inf, tokens, temperature, devices, block, traced)
    z_train, z_inf, tokens = (np.asarray(x) for x in (z_train, z_inf, tokens))
    _check(z_train, z_inf, tokens, temperature)
    from kernel_contracts.kernels.measurement.measure_cpu import measure_rows

    table, redo = measure_rows(z_train, z_inf, tokens, np.float32(1.0 / temperature))
    if redo.any():
        rows = np.flatnonzero(redo)
        again = _again(z_train, z_inf, tokens, rows, temperature, devices, block)
        for i, k in enumerate(COLUMNS):
            table[rows, i] = np.asarray(again[k])
    return {k: jnp.asarray(table[:, i]) for i, k in enumerate(COLUMNS)}


def redo_bucket(n: int, block: int = 8) -> int:
    """The row count the XLA program recomputes ``n`` flagged rows at: the next power of two
    (at least ``block``) up to 1024 rows, above that the next multiple of an eighth of the
    power of two below ``n`` (at most 1/8 more rows than flagged)."""
    if n <= 1024:
        return max(block, 1 << (n - 1).bit_length())
    step = 1 << ((n - 1).bit_length() - 4)
    return -(-n // step) * step


def _again(z_train, z_inf, tokens, rows: np.ndarray, temperature, devices, block):
    """The XLA program's columns of ``rows`` (flagged by a faster pass), computed at
    ``redo_bucket(len(rows))`` rows (the last one repeated) and cut back."""
    padded = np.concatenate([rows, np.full(redo_bucket(rows.size, block) - rows.size, rows[-1])])
    again = _measure_jax(
        z_train[padded], z_inf[padded], tokens[padded], temperature, devices, block, nested=False
    )
    return {k: v[: rows.size] for k, v in again.items()}


def _measure_pallas(z_train, z_inf, tokens, temperature, devices, block, traced: bool):
    """``kernels.measurement.measure_pallas``'s columns, its flagged rows taken from the JAX path:
    only those rows for arrays; for traced values (no row count to branch on) the JAX path's values
    of every row, computed only when some row is flagged."""
    from kernel_contracts.kernels.measurement.measure_pallas import measure_rows as pallas_rows

    z_train, z_inf, tokens = _inputs(z_train, z_inf, tokens, temperature)
    if z_train.shape[0] == 0:
        return {k: jnp.zeros((0,), jnp.float32) for k in COLUMNS}
    interpret = jax.default_backend() != "gpu"
    inv_t = jnp.float32(1.0 / temperature)
    out, redo = pallas_rows(z_train, z_inf, tokens, inv_t, interpret=interpret)
    if traced:

        def again(out):
            slow = _measure_jax(z_train, z_inf, tokens, temperature, devices, block, True)
            return {k: jnp.where(redo, slow[k], out[k]) for k in COLUMNS}

        return jax.lax.cond(jnp.any(redo), again, lambda out: out, out)
    rows = np.flatnonzero(np.asarray(redo))
    if not rows.size:
        return out
    again = _again(z_train, z_inf, tokens, rows, temperature, devices, block)
    return {k: out[k].at[rows].set(again[k]) for k in COLUMNS}


def _inputs(z_train, z_inf, tokens, temperature) -> tuple[Array, Array, Array]:
    """The logits as float32 and the tokens as int32 arrays, checked (``_check``)."""
    z_train = jnp.asarray(z_train, jnp.float32)
    z_inf = jnp.asarray(z_inf, jnp.float32)
    tokens = jnp.asarray(tokens, jnp.int32)
    _check(z_train, z_inf, tokens, temperature)
    return z_train, z_inf, tokens


def _check(z_train, z_inf, tokens, temperature) -> None:
    if z_train.ndim != 2 or z_train.shape != z_inf.shape or tokens.shape != z_train.shape[:1]:
        raise ValueError(
            f"expected z_train and z_inf [tokens, vocab] and tokens [tokens]; got "
            f"{z_train.shape}, {z_inf.shape}, {tokens.shape}"
        )
    check_temperature(temperature)
    vocab = z_train.shape[1]
    if vocab < 1:
        raise ValueError("the vocabulary is empty")
    if not isinstance(tokens, jax.core.Tracer) and tokens.size:
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab:
            raise ValueError(f"token ids must lie in [0, {vocab}), got [{lo}, {hi}]")


def _measure_jax(z_train, z_inf, tokens, temperature, devices, block, nested: bool):
    """The XLA program's columns; ``nested``: the inputs are traced (a caller's ``jax.jit``)."""
    z_train, z_inf, tokens = _inputs(z_train, z_inf, tokens, temperature)
    if z_train.shape[0] == 0:
        return {k: jnp.zeros((0,), jnp.float32) for k in COLUMNS}
    n = z_train.shape[0]
    whole = max(n, block * len(devices))  # whole blocks: a row's bits do not depend on n
    pad = whole - n + (-whole) % len(devices)
    if pad:
        z_train = jnp.pad(z_train, ((0, pad), (0, 0)))
        z_inf = jnp.pad(z_inf, ((0, pad), (0, 0)))
        tokens = jnp.pad(tokens, (0, pad))
    if not nested:  # arrays placed elsewhere (a model's mesh) move to this program's devices
        z_train, z_inf, tokens = _placed((z_train, z_inf, tokens), devices)
    out = _compiled(devices, block, nested)(z_train, z_inf, tokens, jnp.float32(1.0 / temperature))
    return {k: v[:n] for k, v in out.items()} if pad else out


def _placed(arrays, devices: tuple):
    """``arrays`` on ``devices``: whole on the one device, or rows split over several."""
    if len(devices) == 1:
        return jax.device_put(arrays, devices[0])
    shard = NamedSharding(Mesh(np.array(devices), ("tokens",)), PartitionSpec("tokens"))
    return jax.device_put(arrays, shard)


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
