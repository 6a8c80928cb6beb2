"""The one entry point: ``matmul`` and its ``lax.dot_general``-compatible twin."""

from __future__ import annotations

from functools import cache, partial
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.contracts import MatmulSpec
from kernel_contracts.kernels._matmul.fast import reduce_quantized
from kernel_contracts.kernels._matmul.int8 import check_int8_spec, int8_matmul, may_overflow
from kernel_contracts.kernels._matmul.plan import make_plan
from kernel_contracts.kernels._matmul.reference import matmul_reference
from kernel_contracts.kernels.numerics.formats import cast_output
from kernel_contracts.kernels.numerics.scaling import quantize_cols, quantize_rows

__all__ = ["QuantizedWeight", "emulated_dot_general", "matmul", "quantize_weight"]

Impl = Literal["jax", "pallas", "pallas_gpu", "numpy"]


class QuantizedWeight(NamedTuple):
    """A right operand ``w`` (K, N) quantized for a matmul spec, as step 1 of the arithmetic
    quantizes it (:func:`quantize_weight`); :func:`matmul` takes it in place of ``w``.

    A weight read by many matmuls (every step of a decode) is quantized once this way: the
    same values and scales, so the same bits. Leading axes (stacked layers) are allowed; a
    ``lax.scan`` over them hands each layer its own ``QuantizedWeight``."""

    values: Float[Array, "*lead k n"]  # quantized values, float32
    scales: Float[Array, "*lead runs n"]  # float32 scales, one per scale run of each column


def _quantize_2d(w, spec: MatmulSpec) -> QuantizedWeight:
    with jax.named_scope("quantize_weight"):
        plan = make_plan(spec, w.shape[0])  # the quantization does not depend on the splits
        return QuantizedWeight(*quantize_cols(w, plan.inputs, plan.scaling))


def quantize_weight(w: Float[ArrayLike, "*lead k n"], spec: MatmulSpec) -> QuantizedWeight:
    """``w`` quantized once for ``spec`` (a float, non-int8 spec), over any leading axes;
    ``matmul(x, quantize_weight(w, spec), spec)`` is ``matmul(x, w, spec)`` bit for bit."""
    if spec.is_int8:
        raise ValueError("an int8 spec quantizes its weight with its product: pass w itself")
    w = jnp.asarray(w, jnp.float32)
    if w.ndim < 2:
        raise ValueError(f"a weight has shape (..., K, N), got {w.shape}")
    make_plan(spec, int(w.shape[-2]))  # validate before tracing
    with jax.enable_x64(True):
        if isinstance(w, jax.core.Tracer):  # inside the caller's trace: its ops, inlined
            return _stacked_quantizer(spec, w.ndim - 2)(w)
        return _quantizer(spec, w.ndim - 2)(w)


def _stacked_quantizer(spec: MatmulSpec, lead: int):
    """:func:`_quantize_2d` for ``spec``, mapped over ``lead`` leading axes."""
    one = partial(_quantize_2d, spec=spec)
    for _ in range(lead):
        one = jax.vmap(one)
    return one


@cache
def _quantizer(spec: MatmulSpec, lead: int):
    """:func:`_stacked_quantizer` as one compiled program: run op by op, each of its few dozen
    operations compiled on its own for each new shape (seconds per weight shape on CPU); the
    same operations either way, so the same bits (the tests compare both with the quantization
    inside :func:`matmul`'s program)."""
    return jax.jit(_stacked_quantizer(spec, lead))


def _matmul_2d(x, w, spec: MatmulSpec, impl: str, splits: int, interpret: bool | None):
    plan = make_plan(spec, x.shape[1], splits)
    xq, sx = quantize_rows(x, plan.inputs, plan.scaling)
    wq, sw = w if isinstance(w, QuantizedWeight) else _quantize_2d(w, spec)
    if impl == "pallas_gpu" or (impl == "pallas" and _gpu_kernel(interpret)):
        from kernel_contracts.kernels._matmul.pallas_gpu import reduce_quantized_pallas_gpu

        # quantize_cols(w) is quantize_rows(w.T) transposed, bit for bit
        total = reduce_quantized_pallas_gpu(xq, sx, wq.T, sw.T, plan, interpret=interpret)
    elif impl == "pallas":
        from kernel_contracts.kernels._matmul.pallas import reduce_quantized_pallas

        total = reduce_quantized_pallas(xq, sx, wq.T, sw.T, plan, interpret=interpret)
    else:  # w quantized in its own layout, the scales per column: no transposed copy
        total = reduce_quantized(xq, sx, wq, sw, plan, w_k_leading=True)
    return cast_output(total, plan.output)


def _gpu_kernel(interpret: bool | None) -> bool:
    """Whether ``impl="pallas"`` runs the GPU-shaped kernel: when it is compiled for a GPU."""
    return not interpret and jax.default_backend() == "gpu"


# On CPU, 512-bit vectors run the loops 10-20 % faster than XLA's default of 256 bits (same
# bits: the vector width changes no operation). Compiler options belong to the outermost
# compilation, so under a caller's jax.jit (or vmap) matmul compiles with the caller's.
_CPU_OPTIONS = {"xla_cpu_prefer_vector_width": 512}


@cache
def _compiled(cpu: bool):
    return jax.jit(
        _matmul_2d,
        static_argnames=("spec", "impl", "splits", "interpret"),
        compiler_options=_CPU_OPTIONS if cpu else None,
    )


def matmul(
    x: Float[ArrayLike, "... k"],
    w: Float[ArrayLike, "k n"] | QuantizedWeight,
    spec: MatmulSpec,
    *,
    impl: Impl = "jax",
    splits: int = 1,
    interpret: bool | None = None,
) -> Float[Array, "... n"] | Float[np.ndarray, "... n"]:
    """``x @ w`` with the arithmetic of ``spec`` (see :mod:`kernels._matmul` for the definition).

    Args:
      x: float array (..., K); leading axes are flattened into rows.
      w: float array (K, N), or the :class:`QuantizedWeight` of one (:func:`quantize_weight`
        with the same ``spec``).
      spec: the matmul arithmetic (hashable; static under ``jax.jit``).
      impl: ``"jax"`` (vectorised), ``"pallas"`` (``pl.pallas_call``: compiled for a GPU, the
        GPU-shaped kernel of ``kernels._matmul.pallas_gpu``; elsewhere the one of
        ``kernels._matmul.pallas``), ``"pallas_gpu"`` (the GPU-shaped kernel on any backend,
        interpreted off the GPU) or ``"numpy"`` (the reference; needs concrete arrays,
        returns a NumPy array).
      splits: number of contiguous K parts reduced independently and joined in float32.
      interpret: Pallas interpret mode; ``None`` means interpret unless running on a GPU.

    Returns:
      float32 (..., N), every value representable in ``spec.output``.
    """
    if impl not in ("jax", "pallas", "pallas_gpu", "numpy"):
        raise ValueError(f"impl must be 'jax', 'pallas', 'pallas_gpu' or 'numpy', got {impl!r}")
    quantized = isinstance(w, QuantizedWeight)
    w_shape = jnp.shape(w.values if quantized else w)
    if len(w_shape) != 2 or jnp.ndim(x) < 1 or jnp.shape(x)[-1] != w_shape[0]:
        raise ValueError(f"matmul shapes do not fit: x {jnp.shape(x)}, w {w_shape}")
    if quantized and (spec.is_int8 or impl == "numpy"):
        raise ValueError("a QuantizedWeight is for the JAX and Pallas paths of a float spec")
    if spec.is_int8:
        return _int8(x, w, spec, impl)
    make_plan(spec, int(w_shape[0]), splits)  # validate before tracing
    if impl == "numpy":
        return matmul_reference(np.asarray(x), np.asarray(w), spec, splits=splits)
    lead, k, n = jnp.shape(x)[:-1], jnp.shape(x)[-1], w_shape[1]
    rows = int(np.prod(lead)) if lead else 1
    if rows == 0 or n == 0 or k == 0:  # an empty sum is +0
        return jnp.zeros((*lead, n), jnp.float32)
    x2 = jnp.reshape(jnp.asarray(x, jnp.float32), (rows, k))
    w = QuantizedWeight(*map(jnp.asarray, w)) if quantized else jnp.asarray(w, jnp.float32)
    with jax.enable_x64(True):
        traced = any(isinstance(a, jax.core.Tracer) for a in (x2, *jax.tree.leaves(w)))
        run = _compiled(not traced and jax.default_backend() == "cpu")
        out = run(x2, w, spec, impl, splits, interpret)
    return out.reshape(*lead, n)


def _int8(x, w, spec: MatmulSpec, impl: str):
    """The int8 path of :func:`matmul`: exact int32 accumulation, so ``splits`` changes nothing.
    A K whose sums could leave the int32 range is refused: :func:`int8_matmul` emulates the
    wrap and says where it happened."""
    lead, k, n = jnp.shape(x)[:-1], int(jnp.shape(x)[-1]), int(jnp.shape(w)[1])
    check_int8_spec(spec, k)
    if may_overflow(spec, k):
        raise ValueError(
            f"int8 matmul with K = {k}: K·127² = {k * 127**2} > 2**31 - 1, so the int32 "
            "accumulator can wrap; use kernels._matmul.int8_matmul, which emulates the wrap and "
            "returns the mask of wrapped outputs"
        )
    if impl in ("pallas", "pallas_gpu"):
        raise ValueError("int8 inputs have no Pallas kernel: use impl='jax' or 'numpy'")
    rows = int(np.prod(lead)) if lead else 1
    xp = np if impl == "numpy" else jnp
    x2 = xp.reshape(xp.asarray(x, np.float32), (rows, k))
    y = int8_matmul(x2, xp.asarray(w, np.float32), spec, impl=impl).y
    return y.reshape(*lead, n)


def emulated_dot_general(
    lhs: Float[ArrayLike, "*lhs"],
    rhs: Float[ArrayLike, "*rhs"],
    dimension_numbers,
    spec: MatmulSpec,
    *,
    impl: Impl = "jax",
    splits: int = 1,
    interpret: bool | None = None,
    precision=None,
    preferred_element_type=None,
) -> Float[Array, "*out"] | Float[np.ndarray, "*out"]:
    """``lax.dot_general`` with the arithmetic of ``spec``; same argument and output layout.

    Every batch element is an independent emulated matmul (its own scales). ``precision`` is
    accepted for signature compatibility and ignored; ``preferred_element_type`` only sets the
    dtype of the returned array (the values are those of ``spec.output``).
    """
    del precision
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = tuple(lc), tuple(rc), tuple(lb), tuple(rb)
    lshape, rshape = jnp.shape(lhs), jnp.shape(rhs)
    lfree = [d for d in range(len(lshape)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(rshape)) if d not in rc and d not in rb]
    k = int(np.prod([lshape[d] for d in lc])) if lc else 1
    bshape = [lshape[d] for d in lb]
    mshape = [lshape[d] for d in lfree]
    nshape = [rshape[d] for d in rfree]
    b, m, n = int(np.prod(bshape)), int(np.prod(mshape)), int(np.prod(nshape))
    xl = jnp.transpose(jnp.asarray(lhs), (*lb, *lfree, *lc)).reshape(b, m, k)
    xr = jnp.transpose(jnp.asarray(rhs), (*rb, *rc, *rfree)).reshape(b, k, n)
    if impl == "numpy":
        out = (
            np.stack(
                [
                    matmul(np.asarray(xl[i]), np.asarray(xr[i]), spec, impl="numpy", splits=splits)
                    for i in range(b)
                ]
            )
            if b
            else np.zeros((0, m, n), np.float32)
        )
    else:
        one = partial(matmul, spec=spec, impl=impl, splits=splits, interpret=interpret)
        out = jax.vmap(one)(xl, xr) if b != 1 else one(xl[0], xr[0])[None]
    out = out.reshape(*bshape, *mshape, *nshape)
    if preferred_element_type is not None:
        out = out.astype(preferred_element_type)
    return out
