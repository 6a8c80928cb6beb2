"""The int8 matmul in JAX: quantize, accumulate exactly, wrap as int32, apply the epilogue.

The definition is the package docstring's "Int8 inputs" section. Products of int8 values are
integers of magnitude at most 127² and their sums are formed by a binary64 ``dot``: every
partial sum is an integer below ``2**53`` in magnitude (K < 2**36 is checked), so the binary64
sum is the exact integer sum in whatever order and with whatever fusion the backend uses. The
exact sums are then wrapped into int32 (two's complement), which is what a hardware int32
accumulator holds whatever its summation order, since wrapping commutes with addition.

:func:`int8_matmul` returns the output together with the exact sums, the int32 values and the
mask of outputs whose accumulator wrapped, so an overflow is detected, never silent.
:func:`kernels._matmul.matmul` refuses an int8 matmul whose K could overflow.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from kernel_contracts.contracts import MatmulSpec
from kernel_contracts.kernels._matmul.epilogue import EpilogueCode, apply_epilogue, epilogue_code
from kernel_contracts.kernels._matmul.int8_reference import Int8Product, int8_matmul_reference
from kernel_contracts.kernels.numerics.formats import int_format_info
from kernel_contracts.kernels.numerics.portlint import order_free
from kernel_contracts.kernels.numerics.scaling import quantize_rows_int8

__all__ = ["INT32_MAX", "MAX_K", "check_int8_spec", "int8_matmul"]

INT32_MAX = 2**31 - 1
MAX_K = 2**36  # binary64 sums of int8 products stay exact integers (2**36 · 127² < 2**53)


def check_int8_spec(spec: MatmulSpec, k: int) -> None:
    """Raise ``ValueError`` listing every reason ``spec`` cannot reduce ``k`` elements."""
    problems = []
    ep = spec.epilogue
    if getattr(spec.accumulator, "dtype", None) != "int32":
        problems.append("matmul.accumulator: int8 inputs are accumulated in int32")
    if spec.scaling.kind not in ("per_row", "per_tensor"):
        problems.append(f"matmul.scaling: {spec.scaling!r} is not per_row or per_tensor")
    if spec.output not in ("float32", "bfloat16", "float16"):
        problems.append(f"matmul.output: {spec.output!r} is not float32, bfloat16 or float16")
    if ep is None:
        problems.append("matmul.epilogue: missing")
    elif ep.scales not in ("float32", "bfloat16", "float16") or (ep.order is None and not ep.fused):
        problems.append(f"matmul.epilogue: {ep!r} is not a complete epilogue")
    if spec.k_max is None:
        problems.append("matmul.k_max: missing")
    elif k > spec.k_max:
        problems.append(
            f"K = {k} exceeds the declared k_max = {spec.k_max}: the contract's exactness "
            "obligations do not cover this reduction"
        )
    if k > MAX_K:
        problems.append(f"K = {k} is beyond the emulation's exact range (K <= 2**36)")
    if problems:
        raise ValueError("invalid int8 matmul:\n  " + "\n  ".join(problems))


@partial(jax.jit, static_argnames=("static",))
def _int8_2d(x, w, per_tensor, code, static: tuple[EpilogueCode, bool] | None) -> Int8Product:
    """One int8 matmul; the spec arrives static (``static`` = (code, per_tensor): only its own
    epilogue is compiled) or as data (``per_tensor`` and ``code`` arrays: one program for
    every spec)."""
    if static is not None:
        code, per_tensor = static
    xq, sx = quantize_rows_int8(x, per_tensor, code.scales)
    wq_t, sw = quantize_rows_int8(w.T, per_tensor, code.scales)
    xi = jnp.where(jnp.isnan(xq), jnp.float32(0), xq).astype(
        jnp.float64
    )  # a NaN run: its scale is NaN
    wi = jnp.where(jnp.isnan(wq_t), jnp.float32(0), wq_t).astype(jnp.float64)
    # each product is at most 127 * 127, so a sum of k < 2**53 / 127**2 (5.5e11) of them is an
    # integer below 2**53: exact in binary64, whatever the order
    with order_free():
        exact = jnp.dot(xi, wi.T, precision=jax.lax.Precision.HIGHEST).astype(jnp.int64)
    acc = ((exact + 2**31) & 0xFFFF_FFFF) - 2**31
    y = apply_epilogue(acc, sx, sw.T, code)
    return Int8Product(y, exact, acc, exact != acc)


def int8_matmul(
    x: Float[ArrayLike, "m k"],
    w: Float[ArrayLike, "k n"],
    spec: MatmulSpec,
    *,
    impl: Literal["jax", "numpy"] = "jax",
    specialize: bool = True,
) -> Int8Product:
    """``x @ w`` with the int8 arithmetic of ``spec`` (package docstring), and the state of
    its accumulator; ``impl="numpy"`` runs the reference and returns NumPy arrays.

    ``specialize``: compile the spec's own epilogue (one program per spec and shape); False
    passes the spec as data, so one program per shape serves every spec (sweeps, tests). Both
    give the same bits.

    Raises ``ValueError`` when K exceeds ``spec.k_max`` or ``spec`` is not an int8 spec.
    """
    if impl not in ("jax", "numpy"):
        raise ValueError(f"int8 inputs have impl 'jax' or 'numpy' (no Pallas kernel), got {impl!r}")
    if jnp.ndim(x) != 2 or jnp.ndim(w) != 2 or jnp.shape(x)[1] != jnp.shape(w)[0]:
        raise ValueError(f"matmul shapes do not fit: x {jnp.shape(x)}, w {jnp.shape(w)}")
    (m, k), n = jnp.shape(x), jnp.shape(w)[1]
    check_int8_spec(spec, int(k))
    if impl == "numpy":
        return int8_matmul_reference(np.asarray(x), np.asarray(w), spec)
    if m == 0 or n == 0 or k == 0:  # an empty sum is +0
        zeros = jnp.zeros((m, n), jnp.int64)
        return Int8Product(jnp.zeros((m, n), jnp.float32), zeros, zeros, zeros != 0)
    with jax.enable_x64(True):
        pt = spec.scaling.kind == "per_tensor"
        x, w = jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32)
        if specialize:
            static = (epilogue_code(spec.epilogue, spec.output), pt)
            return _int8_2d(x, w, None, None, static=static)
        code = epilogue_code(spec.epilogue, spec.output, traced=True)
        return _int8_2d(x, w, jnp.bool_(pt), code, static=None)


def may_overflow(spec: MatmulSpec, k: int) -> bool:
    """Whether some int8 inputs make a length-``k`` sum leave the int32 range."""
    return k * int_format_info("int8").qmax ** 2 > INT32_MAX
