"""The emulated matmul with its scales changed: rounded up to powers of two, or stored in bf16.

``rescaled_matmul(x, w, spec, transform)`` computes ``x @ w`` with the arithmetic of ``spec``
(``kernels._matmul``) except for one step: each scale the spec's quantizer computes is replaced
by ``transform(s)`` before the operand is quantized with it, and the replaced scale is the one
the kernel multiplies by afterwards.

* ``"pow2"``: ``s' = 2**ceil(log2 s)``, the scale rounded *up* to a power of two, so
  ``|a| / s' ≤ |a| / s`` and nothing saturates that did not before. Every multiplication by a
  power-of-two scale is exact (while it stays in range), so whatever two kernels still
  disagree on with power-of-two scales does not come from the scale arithmetic: the epilogue
  order, a fused or separate epilogue, the products ``sx·sw`` of block scales. The values use
  up to one bit less of the input format's range. Int8 scales stored in float16 are capped at
  2**15 (the largest power of two float16 holds).
* ``"bfloat16"``: ``s' = bf16(s)``, the scale rounded to nearest bfloat16 (a kernel that keeps
  its scales in bf16 registers). A scale rounded down makes the largest value of its run
  exceed the format's maximum, and it saturates.

Specs whose inputs are float32, bfloat16 or float16 have no scales (every scale is 1), so both
transforms leave them unchanged. NaN scales (a run with a non-finite value) stay NaN.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.contracts import MatmulSpec
from kernel_contracts.kernels._matmul import matmul
from kernel_contracts.kernels._matmul.epilogue import apply_epilogue, epilogue_code
from kernel_contracts.kernels._matmul.fast import reduce_quantized
from kernel_contracts.kernels._matmul.int8 import check_int8_spec
from kernel_contracts.kernels._matmul.plan import Plan, make_plan
from kernel_contracts.kernels.numerics.bitround import reciprocal
from kernel_contracts.kernels.numerics.formats import (
    cast_output,
    flush,
    format_info,
    saturating_cast,
    saturating_round_int,
)
from kernel_contracts.kernels.numerics.portlint import order_free
from kernel_contracts.kernels.numerics.scaling import quantize_rows, quantize_rows_int8

__all__ = ["TRANSFORMS", "pow2_ceil", "rescaled_matmul"]

Transform = Literal["pow2", "bfloat16"]
TRANSFORMS = ("pow2", "bfloat16")


def pow2_ceil(s: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The smallest power of two ≥ ``s`` for positive normal float32 ``s`` (NaN stays NaN)."""
    bits = lax.bitcast_convert_type(s.astype(jnp.float32), jnp.int32)
    exponent = (bits >> 23) & 0xFF
    up = lax.bitcast_convert_type((exponent + 1) << 23, jnp.float32)
    return jnp.where(((bits & 0x7FFFFF) == 0) | jnp.isnan(s), s, up)


def _transform(s, transform: str):
    if transform == "pow2":
        return pow2_ceil(s)
    return saturating_cast(s, "bfloat16")


def _requantize(a, plan: Plan, transform: str):
    _, s = quantize_rows(a, plan.inputs, plan.scaling)
    s2 = _transform(s, transform)
    k = a.shape[1]
    run = plan.scaling.block if plan.scaling.varies_along_k else k
    inv = reciprocal(s2)
    inv_full = jnp.repeat(inv, run, axis=1, total_repeat_length=s2.shape[1] * run)[:, :k]
    return saturating_cast(flush(a.astype(jnp.float32)) * inv_full, plan.inputs), s2


@partial(jax.jit, static_argnames=("spec", "splits", "transform"))
def _float_rescaled(x, w, spec: MatmulSpec, splits: int, transform: str):
    plan = make_plan(spec, x.shape[1], splits)
    xq, sx = _requantize(x, plan, transform)
    wq_t, sw_t = _requantize(w.T, plan, transform)
    return cast_output(reduce_quantized(xq, sx, wq_t, sw_t, plan), plan.output)


_POW2_MAX = {"float32": 2.0**127, "bfloat16": 2.0**127, "float16": 2.0**15}


def _int8_scale(s, scales: str, transform: str):
    if transform == "bfloat16":
        return saturating_cast(s, "bfloat16")
    return jnp.minimum(pow2_ceil(s), jnp.float32(_POW2_MAX[scales]))


@partial(jax.jit, static_argnames=("per_tensor", "code", "transform"))
def _int8_rescaled(x, w, per_tensor: bool, code, transform: str):
    scales = ("float32", "bfloat16", "float16")[code.scales]
    _, sx = quantize_rows_int8(x, per_tensor, scales)
    _, sw = quantize_rows_int8(w.T, per_tensor, scales)
    sx, sw = _int8_scale(sx, scales, transform), _int8_scale(sw, scales, transform)
    xq = saturating_round_int(flush(x) * reciprocal(sx), "int8")
    wq = saturating_round_int(flush(w.T) * reciprocal(sw), "int8")
    xi = jnp.where(jnp.isnan(xq), jnp.float32(0), xq).astype(jnp.float64)
    wi = jnp.where(jnp.isnan(wq), jnp.float32(0), wq).astype(jnp.float64)
    with (
        order_free()
    ):  # integer products below 2**14, sums below 2**53: exact (kernels._matmul.int8)
        exact = jnp.dot(xi, wi.T, precision=lax.Precision.HIGHEST).astype(jnp.int64)
    acc = ((exact + 2**31) & 0xFFFF_FFFF) - 2**31
    return apply_epilogue(acc, sx, sw.T, code)


def rescaled_matmul(
    x: Float[ArrayLike, "m k"],
    w: Float[ArrayLike, "k n"],
    spec: MatmulSpec,
    transform: Transform,
    *,
    splits: int = 1,
) -> Float[Array, "m n"]:
    """``x @ w`` under ``spec`` with every scale replaced by ``transform`` of it (module
    docstring); float32 values representable in ``spec.output``."""
    if transform not in TRANSFORMS:
        raise ValueError(f"transform must be one of {TRANSFORMS}, got {transform!r}")
    if jnp.ndim(x) != 2 or jnp.ndim(w) != 2 or jnp.shape(x)[1] != jnp.shape(w)[0]:
        raise ValueError(f"matmul shapes do not fit: x {jnp.shape(x)}, w {jnp.shape(w)}")
    (m, k), n = jnp.shape(x), jnp.shape(w)[1]
    scaled = spec.is_int8 or format_info(spec.inputs).is_fp8
    if not scaled or m == 0 or n == 0 or k == 0:
        return matmul(x, w, spec, splits=splits)
    x = jnp.asarray(np.asarray(x, np.float32) if isinstance(x, np.ndarray) else x, jnp.float32)
    w = jnp.asarray(w, jnp.float32)
    with jax.enable_x64(True):
        if spec.is_int8:
            check_int8_spec(spec, int(k))
            code = epilogue_code(spec.epilogue, spec.output)
            return _int8_rescaled(x, w, spec.scaling.kind == "per_tensor", code, transform)
        make_plan(spec, int(k), splits)  # validate before tracing
        return _float_rescaled(x, w, spec, splits, transform)
