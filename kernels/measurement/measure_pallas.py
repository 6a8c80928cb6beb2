"""Full-vocabulary measurement as one Pallas kernel (compiled through Triton on a GPU,
``interpret=True`` on the CPU): the formulas of ``kernels.measurement.measure_fused``, computed over
vocabulary chunks with running (online) summaries, so a row of any length is read chunk by chunk
and never needs to fit on chip.

What one pass over a row's chunks carries, per row:

- the maximum of z, its first index i₁ and the runner-up; the first argmax of z'; a NaN flag;
- the pivot d(i₁) of the running argmax as a two-sum pair (``centred_drift``), and the largest and
  smallest centred drift w = d − d(i₁); when a later chunk holds a new maximum, the pivot moves
  and everything kept relative to it shifts by the exact difference of the two pivots;
- S = Σ e, e = exp(z/T − max z/T) (online log-sum-exp: sums are rescaled when the maximum rises),
  its part below the maximum and Σ e·(z − max z)/T (the entropy's terms);
- for π (weights e, values v = w/T) and for π' (weights e' = exp(z'/T − max z'/T), values −v)
  a mergeable summary (S, c, G): the weights' sum, the weighted mean c of the values and
  G = E[φ(v − c)], φ(x) = e^x − 1 − x, so that log1p(G) = log E[e^{v − c}]. Each chunk's summary
  is taken about its own mean (the chunk sits in registers, so this is no second read), and two
  summaries a, b merge exactly, with no cancellation (every term is ≥ 0): with α, β their shares
  of the weight and δ_a = β(c_a − c_b), δ_b = −α(c_a − c_b),
  G = α(G_a·e^{δ_a} + φ(δ_a)) + β(G_b·e^{δ_b} + φ(δ_b)) (the exponential analogue of Chan's
  merge of centred second moments). KL(π‖π') = log1p(G_π) and KL(π'‖π) = log1p(G_π').

TV = Σ (π − π')₊ is not such a sum: whether a logit adds to it depends on the sign of v − c −
KL(π‖π'), a threshold known only once the whole row has been read. The kernel therefore sweeps each
row twice: the first sweep reads every logit of both arrays from memory once and computes every
column except TV; the second reads the row again for TV alone, its terms summed per lane over the
chunks and across the lanes once per row. No single read can serve TV: the part of it that the
logits read so far contribute is, as a function of the final threshold (which later logits can still
move), a curve with a kink at each of their values, which no fixed-size summary holds (see
docs/measurement.md). "Reads once" holds for memory when the second sweep hits the cache: the grid
is persistent (``programs`` programs, each walking its share of the rows one block at a time), so
about programs × block_rows × 8·vocab bytes lie between a logit's two reads; with that below the
GPU's L2 cache the second read comes from the cache, not from memory. Measured on an H200 at 151936
logits per row, the kernel is bound by its arithmetic rather than by memory, and fewer programs (40,
for the cache) ran slower than one per row block, the default, under which the second sweep mostly
reads memory again: the logits are read twice from memory, not once.

Rows that the fast formulas do not cover are flagged ``extreme``, as
``kernels.measurement.measure_cpu`` flags them, and the caller recomputes them on the JAX path: a
NaN, no finite maximum, u above ``EXTREME_U``, −inf on one side only, or a summary that overflowed.
The per-token columns of the observed token (log ratio, probability) come from a gather after the
kernel (``columns``). Tested against ``kernels.measurement._measure.measure_numpy``, a float64
reference and the host pass.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from kernel_contracts.kernels.measurement.measure_fused import (
    EXTREME_U,
    SERIES_BELOW,
    log_mass,
    phi_series,
)

__all__ = ["GPU_OPTIONS", "STATS", "columns", "measure_rows", "row_stats"]

# the kernel's per-row outputs (i1 and j1 are int32, the rest float32)
STATS = (
    "zmax", "runner", "i1", "j1", "nan", "w_hi", "w_lo", "pivot_hi", "pivot_lo",
    "s", "s_low", "ez", "c", "kl_pq", "kl_qp", "tv",
)  # fmt: skip
_INTS = ("i1", "j1")
_NEG_INF = -jnp.inf


def _phi(x):
    """φ(x) = e^x − 1 − x: its series where |x| < ½, expm1(x) − x elsewhere."""
    small = jnp.abs(x) < SERIES_BELOW
    safe = jnp.where(small, 1.0, x)  # the unused branch stays finite
    return jnp.where(small, phi_series(x), jnp.expm1(safe) - safe)


def _weighted_phi(e, le, x):
    """e·φ(x) for weights e = exp(le): e^{le + x} − e·(1 + x) where x > 1 (finite where e^x
    alone would overflow), e·φ(x) elsewhere; 0 where e = 0."""
    big = x > 1.0
    xs = jnp.where(big, 1.0, x)
    far = jnp.exp(le + jnp.where(big, x, 0.0)) - e * (1.0 + x)
    return jnp.where(e > 0, jnp.where(big, far, e * _phi(xs)), 0.0)


def _summary(e, le, v):
    """(S, c, G) of one chunk: Σ e, the e-weighted mean c of v and E_e[φ(v − c)]. Where every
    |v − c| of the chunk's rows is below ½ (kernels that differ slightly), φ is its series
    alone and no exponential is taken."""
    s = jnp.sum(e, axis=1)
    safe = jnp.where(s > 0, s, 1.0)
    vv = jnp.where(e > 0, v, 0.0)
    c = jnp.sum(e * vv, axis=1) / safe
    u = vv - c[:, None]
    small = jnp.max(jnp.abs(u)) < SERIES_BELOW

    def series():
        return jnp.sum(e * phi_series(u), axis=1)

    def general():
        return jnp.sum(_weighted_phi(e, le, u), axis=1)

    return s, c, lax.cond(small, series, general) / safe


def _merge(s_a, c_a, g_a, s_b, c_b, g_b):
    """The summary of the union of two weighted sets (weights on one common scale)."""
    s = s_a + s_b
    safe = jnp.where(s > 0, s, 1.0)
    alpha, beta = s_a / safe, s_b / safe
    diff = c_a - c_b
    d_a, d_b = beta * diff, -alpha * diff
    c = jnp.where(s_b > 0, c_b + alpha * diff, c_a)
    part_a = jnp.where(s_a > 0, alpha * (g_a * jnp.exp(d_a) + _phi(d_a)), 0.0)
    part_b = jnp.where(s_b > 0, beta * (g_b * jnp.exp(d_b) + _phi(d_b)), 0.0)
    return s, c, part_a + part_b


def _two_sum_drift(z, zp):
    """d = z' − z as s + err exactly (Knuth's two-sum, additions only), 0 where z = z', err 0
    where s is not finite (as ``centred_drift``)."""
    s = zp - z
    back = s - zp
    err = (zp - (s - back)) - (z + back)
    same = z == zp
    s = jnp.where(same, 0.0, s)
    err = jnp.where(same | ~(jnp.abs(s) < jnp.inf), 0.0, err)
    return s, err


def _scaled_exp(x, top, inv_t):
    """exp(x/T − top/T) and its exponent; 0 for x = −inf (and everywhere while top = −inf)."""
    top_t = top * inv_t
    base = jnp.where(top_t > _NEG_INF, top_t, 0.0)
    le = x * inv_t - base[:, None]
    return jnp.exp(le), le, top_t


def _kernel(inv_t_ref, z_ref, zp_ref, *out_refs, rows, vocab, block_rows, chunk, programs):
    """Each program walks row blocks pid, pid + programs, …: the last block starts at
    rows − block_rows and the last chunk at vocab − chunk (overlaps recomputed, never read out
    of bounds); logits a chunk has already seen are masked out of the overlapping one."""
    inv_t = inv_t_ref[0]
    br, ch = block_rows, chunk
    blocks = -(-rows // br)
    chunks = -(-vocab // ch)
    per = -(-blocks // programs)
    pid = pl.program_id(0)
    lane = jnp.arange(ch, dtype=jnp.int32)[None, :]

    def load(r0, k):
        c0 = jnp.minimum(k * ch, vocab - ch)
        col = c0 + lane
        valid = col >= k * ch
        z = z_ref[pl.ds(r0, br), pl.ds(c0, ch)]
        zp = zp_ref[pl.ds(r0, br), pl.ds(c0, ch)]
        return z, zp, col, valid

    def first_sweep(r0):
        def body(k, st):
            (m, runner, i1, mq, j1, nan, w_hi, w_lo, p_hi, p_lo,
             s, s_low, ez, c, g, sq, cq, gq) = st  # fmt: skip
            z, zp, col, valid = load(r0, k)
            zm = jnp.where(valid, z, _NEG_INF)
            zpm = jnp.where(valid, zp, _NEG_INF)
            bad = valid & ((z != z) | (zp != zp))
            nan = jnp.maximum(nan, jnp.where(bad, 1.0, 0.0))  # per lane, as w_hi and w_lo
            # maxima, first indices, runner-up
            cm = jnp.max(zm, axis=1)
            new = cm > m
            d_hi, d_lo = _two_sum_drift(z, zp)

            def moved():
                """A new maximum in some row: its first index, the runner-up, and the pivot
                d(i₁) there (searched only in the few chunks that raise a maximum)."""
                ci = jnp.min(jnp.where(zm == cm[:, None], col, vocab), axis=1)
                crun = jnp.max(jnp.where(col == ci[:, None], _NEG_INF, zm), axis=1)
                at = col == ci[:, None]
                q_hi = jnp.sum(jnp.where(at, d_hi, 0.0), axis=1)
                q_lo = jnp.sum(jnp.where(at, d_lo, 0.0), axis=1)
                finite = jnp.abs(q_hi) < jnp.inf
                return (
                    jnp.where(new, jnp.maximum(m, crun), jnp.maximum(runner, cm)),
                    jnp.where(new, ci, i1),
                    jnp.where(new, jnp.where(finite, q_hi, 0.0), p_hi),
                    jnp.where(new, jnp.where(finite, q_lo, 0.0), p_lo),
                )

            def kept_top():
                return jnp.maximum(runner, cm), i1, p_hi, p_lo

            any_new = jnp.max(jnp.where(new, 1, 0)) > 0
            runner, i1, n_hi, n_lo = lax.cond(any_new, moved, kept_top)
            m_new = jnp.where(new, cm, m)
            cmq = jnp.max(zpm, axis=1)
            newq = cmq > mq

            def moved_q():
                return jnp.where(newq, jnp.min(jnp.where(zpm == cmq[:, None], col, vocab), 1), j1)

            j1 = lax.cond(jnp.max(jnp.where(newq, 1, 0)) > 0, moved_q, lambda: j1)
            mq_new = jnp.where(newq, cmq, mq)
            # the pivot d(i₁) moves with a new maximum: shift what is kept relative to it
            shift = (p_hi - n_hi) + (p_lo - n_lo)
            w = (d_hi - n_hi[:, None]) + (d_lo - n_lo[:, None])
            w_hi = jnp.maximum(w_hi + shift[:, None], jnp.where(valid, w, _NEG_INF))
            w_lo = jnp.minimum(w_lo + shift[:, None], jnp.where(valid, w, jnp.inf))
            v = w * inv_t
            # π: online log-sum-exp and its summary
            e, le, top_t = _scaled_exp(zm, m_new, inv_t)
            old_t = m * inv_t
            scale = jnp.where(m > _NEG_INF, jnp.exp(old_t - top_t), 0.0)
            rise = jnp.where(m > _NEG_INF, top_t - old_t, 0.0)
            kept = s * scale
            s_low = jnp.where(new, kept, s_low) + jnp.sum(jnp.where(le < 0, e, 0.0), axis=1)
            ez = jnp.where(s > 0, scale * (ez - rise * s), 0.0)
            ez = ez + jnp.sum(jnp.where(e > 0, e * le, 0.0), axis=1)
            s, c, g = _merge(kept, c + shift * inv_t, g, *_summary(e, le, v))
            # π': the same summary of −v under weights e'
            eq, leq, topq_t = _scaled_exp(zpm, mq_new, inv_t)
            oldq_t = mq * inv_t
            scaleq = jnp.where(mq > _NEG_INF, jnp.exp(oldq_t - topq_t), 0.0)
            sq, cq, gq = _merge(sq * scaleq, cq - shift * inv_t, gq, *_summary(eq, leq, -v))
            return (m_new, runner, i1, mq_new, j1, nan, w_hi, w_lo, n_hi, n_lo,
                    s, s_low, ez, c, g, sq, cq, gq)  # fmt: skip

        f = jnp.zeros((br,), jnp.float32)
        i = jnp.zeros((br,), jnp.int32)
        ninf = jnp.full((br,), _NEG_INF, jnp.float32)
        lanes = jnp.full((br, ch), _NEG_INF, jnp.float32)
        flags = jnp.zeros((br, ch), jnp.float32)
        start = (ninf, ninf, i, ninf, i, flags, lanes, -lanes, f, f, f, f, f, f, f, f, f, f)
        st = lax.fori_loop(0, chunks, body, start)
        # the per-lane flag and extremes, reduced once per row: shifting every lane by the same
        # amount and then taking the maximum rounds as shifting the maximum (rounding is monotone)
        nan, w_hi, w_lo = jnp.max(st[5], axis=1), jnp.max(st[6], axis=1), jnp.min(st[7], axis=1)
        return (*st[:5], nan, w_hi, w_lo, *st[8:])

    def tv_sweep(r0, m, p_hi, p_lo, c, kl):
        """Σ e·(−expm1(v − c − KL))₊: TV times S (the second read of the row), summed per lane
        over the chunks and across the lanes once per row (no reduction per chunk)."""

        def body(k, lanes):
            z, zp, _, valid = load(r0, k)
            d_hi, d_lo = _two_sum_drift(z, zp)
            w = (d_hi - p_hi[:, None]) + (d_lo - p_lo[:, None])
            e, _, _ = _scaled_exp(jnp.where(valid, z, _NEG_INF), m, inv_t)
            r = (w * inv_t - c[:, None]) - kl[:, None]
            return lanes + jnp.where(e > 0, e * jnp.maximum(0.0, -jnp.expm1(r)), 0.0)

        lanes = lax.fori_loop(0, chunks, body, jnp.zeros((br, ch), jnp.float32))
        return jnp.sum(lanes, axis=1)

    def row_block(it, carry):
        b = jnp.minimum(pid + it * programs, blocks - 1)
        r0 = jnp.minimum(b * br, rows - br)
        st = first_sweep(r0)
        m, runner, i1, _, j1, nan, w_hi, w_lo, p_hi, p_lo, s, s_low, ez, c, g, _, _, gq = st
        kl_pq, kl_qp = jnp.log1p(g), jnp.log1p(gq)
        tv = tv_sweep(r0, m, p_hi, p_lo, c, kl_pq) / jnp.where(s > 0, s, 1.0)
        values = (m, runner, i1, j1, nan, w_hi, w_lo, p_hi, p_lo, s, s_low, ez, c, kl_pq, kl_qp, tv)
        for ref, value in zip(out_refs, values, strict=True):
            ref[pl.ds(r0, br)] = value
        return carry

    lax.fori_loop(0, per, row_block, 0)


def _pow2_at_most(n: int, cap: int) -> int:
    size = 1
    while size * 2 <= min(n, cap):
        size *= 2
    return size


@functools.partial(
    jax.jit,
    static_argnames=("block_rows", "chunk", "programs", "interpret", "num_warps", "num_stages"),
)
def row_stats(
    z: Float[ArrayLike, "rows vocab"],
    zp: Float[ArrayLike, "rows vocab"],
    inv_t: Float[ArrayLike, ""],
    *,
    block_rows: int = 1,
    chunk: int = 2048,
    programs: int | None = None,
    interpret: bool = False,
    num_warps: int = 8,
    num_stages: int = 2,
) -> dict[str, Array]:
    """The kernel's per-row ``STATS`` (one Pallas call). ``block_rows`` and ``chunk`` are
    rounded down to powers of two no larger than the array; ``programs`` (default: one per row
    block) bounds how many row blocks are in flight at once."""
    rows, vocab = z.shape
    br = _pow2_at_most(rows, block_rows)
    ch = _pow2_at_most(vocab, chunk)
    blocks = -(-rows // br)
    programs = blocks if programs is None else max(1, min(programs, blocks))
    params = {}
    if not interpret:
        from jax.experimental.pallas import triton as pl_triton

        params["compiler_params"] = pl_triton.CompilerParams(
            num_warps=num_warps, num_stages=num_stages
        )
    shapes = [
        jax.ShapeDtypeStruct((rows,), jnp.int32 if k in _INTS else jnp.float32) for k in STATS
    ]
    kernel = functools.partial(
        _kernel, rows=rows, vocab=vocab, block_rows=br, chunk=ch, programs=programs
    )
    out = pl.pallas_call(
        kernel, out_shape=shapes, grid=(programs,), interpret=interpret, name="measure", **params
    )(jnp.reshape(inv_t, (1,)).astype(jnp.float32), z, zp)
    return dict(zip(STATS, out, strict=True))


def columns(
    stats: dict[str, Array],
    z: Float[ArrayLike, "rows vocab"],
    zp: Float[ArrayLike, "rows vocab"],
    y: Int[ArrayLike, " rows"],
    inv_t,
) -> tuple[dict[str, Float[Array, " rows"]], Bool[Array, " rows"]]:
    """The measured columns from the kernel's statistics and the observed tokens' logits (one
    gather of two logits per row), and the rows to recompute on the JAX path."""
    st = stats
    rows = jnp.arange(z.shape[0])
    zy, zpy = z[rows, y], zp[rows, y]
    dy_hi, dy_lo = _two_sum_drift(zy, zpy)
    wy = (dy_hi - st["pivot_hi"]) + (dy_lo - st["pivot_lo"])
    pivot = st["pivot_hi"] + st["pivot_lo"]
    s, c, kl_pq = st["s"], st["c"], st["kl_pq"]
    masked = (zy == _NEG_INF) & (zpy == _NEG_INF)
    out = {
        "logit_drift": jnp.maximum(st["w_hi"] + pivot, -(st["w_lo"] + pivot)),
        "logit_oscillation": st["w_hi"] - st["w_lo"],
        "tv": jnp.minimum(1.0, st["tv"]),
        "kl_train_inf": kl_pq,
        "kl_inf_train": jnp.maximum(0.0, st["kl_qp"]),
        "log_ratio": jnp.where(masked, jnp.nan, kl_pq - (wy * inv_t - c)),
        "top1_flip": (st["i1"] != st["j1"]).astype(jnp.float32),
        "margin": st["zmax"] - st["runner"],
        "entropy": log_mass(s, st["s_low"]) - st["ez"] / s,
        "token_prob": jnp.exp(zy * inv_t - st["zmax"] * inv_t) / s,
    }
    u_hi = st["w_hi"] * inv_t - c
    extreme = (
        (st["nan"] > 0)
        | ~jnp.isfinite(st["zmax"])
        | ~(u_hi <= EXTREME_U)
        | ~(st["w_lo"] > _NEG_INF)
        | ~jnp.isfinite(kl_pq)
        | ~jnp.isfinite(st["kl_qp"])
        | ~jnp.isfinite(st["tv"])
    )
    return out, extreme


# the GPU's defaults (see bench/bench_measure_gpu.py for how they were chosen)
GPU_OPTIONS = {"block_rows": 1, "chunk": 2048, "programs": None, "num_warps": 8, "num_stages": 2}


@functools.partial(jax.jit, static_argnames=("interpret", "options"))
def _measure_rows(z, zp, y, inv_t, interpret: bool, options: tuple):
    stats = row_stats(z, zp, inv_t, interpret=interpret, **dict(options))
    return columns(stats, z, zp, y, inv_t)


def measure_rows(
    z: Float[ArrayLike, "rows vocab"],
    zp: Float[ArrayLike, "rows vocab"],
    y: Int[ArrayLike, " rows"],
    inv_t,
    *,
    interpret: bool,
    **options,
) -> tuple[dict[str, Float[Array, " rows"]], Bool[Array, " rows"]]:
    """The columns (float32) of every row and the mask of rows to recompute on the JAX path:
    ``row_stats`` then ``columns`` in one compiled program (jit-compatible). ``options``:
    ``row_stats``'s, default ``GPU_OPTIONS``."""
    chosen = tuple(sorted({**GPU_OPTIONS, **options}.items()))
    z = jnp.asarray(z, jnp.float32)
    zp = jnp.asarray(zp, jnp.float32)
    y = jnp.asarray(y, jnp.int32)
    return _measure_rows(z, zp, y, jnp.asarray(inv_t, jnp.float32), interpret, chosen)
