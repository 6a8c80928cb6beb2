"""What the pure-JAX path and the two Pallas kernels share: the operand layout, padding, the
scaled promotion term, and the data check that lets the binary32 path stand in for the binary64
one. Each implementation imports these from here, never from another implementation.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap
from jaxtyping import Array, ArrayLike, Bool, Float

from kernel_contracts.kernels._matmul.plan import Plan
from kernel_contracts.kernels.numerics.bitround import round_binary32
from kernel_contracts.kernels.numerics.formats import format_info

__all__ = ["binary32_exact", "for_all", "lay_out", "pad_to", "scaled_term"]


def lay_out(q_t: Float[ArrayLike, "rows k"], plan: Plan) -> Float[Array, "steps group rows"]:
    """Quantized rows (a K-major operand) arranged in the plan's (steps, group) slots."""
    pos = plan.positions()
    rows = q_t.shape[0]
    if pos.size == plan.k and np.array_equal(pos.ravel(), np.arange(plan.k)):
        return q_t.T.reshape(plan.steps, plan.group, rows)
    valid = jnp.asarray(pos >= 0)[..., None]
    gathered = jnp.take(q_t, jnp.asarray(np.maximum(pos, 0)), axis=1)  # rows, steps, group
    return jnp.where(valid, jnp.moveaxis(gathered, 0, -1), jnp.zeros((), q_t.dtype))


def scaled_term(a, sx_col, sw_row):
    """``flush(fl32(a * c))`` with ``c = flush(fl32(sx * sw))`` (exact binary64 products, each
    rounded once by :func:`kernels.numerics.bitround.round_binary32`; ``c`` stays binary64)."""
    c = round_binary32(sx_col.astype(jnp.float64) * sw_row.astype(jnp.float64))
    return round_binary32(a.astype(jnp.float64) * c).astype(jnp.float32)  # exact conversion


def pad_to(a, axis: int, multiple: int, value=0.0):
    """``a`` padded with ``value`` at the end of ``axis`` to a multiple of ``multiple``."""
    extra = -a.shape[axis] % multiple
    if not extra:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return jnp.pad(a, widths, constant_values=jnp.asarray(value, a.dtype))  # no f64 constant


# ---------------------------------------------------------------------------------------------
# the data check of the binary32 path


def binary32_exact(
    xq: Float[ArrayLike, "m k"], wq_t: Float[ArrayLike, "_n_or_k _k_or_n"], inputs: str
) -> Bool[Array, ""]:
    """True when every product of a quantized ``x`` value and ``w`` value is exact in binary32
    and every sum of them is a multiple of ``2**-126`` (so never a binary32 subnormal).

    A value of exponent ``e`` in a format with ``f`` fraction bits is a multiple of
    ``2**(e - f)``; products are then multiples of ``2**(ex + ew - 2f)`` with ``ex``, ``ew`` the
    smallest exponents present, and so is every binary32 sum and rounding of them. Products have
    at most ``2f + 2 <= 24`` significant bits, so they are exact unless they overflow, which
    ``hx + hw + 2 <= 128`` excludes (``2**h`` the largest powers of two present, so every
    product is below ``2**(hx + hw + 2)``). Operands holding a NaN fail the check (the binary64
    loop handles them).
    """
    frac = format_info(inputs).mantissa_bits

    def exponent(v):  # of a normal binary32 number (quantized values are never subnormal)
        return ((lax.bitcast_convert_type(v, jnp.int32) >> 23) & 0xFF) - 127

    def extremes(q):
        # plain min/max reductions, which XLA runs several times faster than masked ones:
        # zeros count as 1 (a lower bound of the smallest non-zero magnitude either way), and
        # a NaN makes the largest magnitude NaN
        mag = jnp.abs(q)
        return jnp.min(mag + (1 - jnp.sign(mag))), jnp.maximum(jnp.max(q), -jnp.min(q))

    low_x, high_x = extremes(xq)
    low_w, high_w = extremes(wq_t)
    finite = (high_x == high_x) & (high_w == high_w)
    exact = exponent(low_x) + exponent(low_w) - 2 * frac >= -126
    below = exponent(high_x) + exponent(high_w) + 2 <= 128
    return finite & exact & below


@custom_vmap
def for_all(flag):
    """``flag`` itself; under ``vmap`` one flag for the whole batch (their conjunction), so the
    ``lax.cond`` it drives stays a branch instead of becoming a select of both."""
    return flag


@for_all.def_vmap
def _for_all_vmap(axis_size, in_batched, flag):
    del axis_size, in_batched
    return jnp.all(flag), False
