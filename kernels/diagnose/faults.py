"""Fault injection: a kernel implementation with one known defect, as a positive control.

A :class:`Candidate` is an implementation under test: the ``MatmulSpec`` it declares and a
function ``matmul(x, w, splits) -> y`` (2-D operands, float32 result, ``splits`` the split-K
parts its batch asks for). ``inject(fault, spec)`` returns the implementation of ``spec``
(the JAX path of ``kernels._matmul``) with the fault put in; the fault ``"null"`` puts nothing
in, and must be detected by no check. Each fault names the check designed to detect it
(``verify.conformance`` holds the checks).

========================  ===================================================================
``null``                  no change
``scale_bf16``            the scales kept in bfloat16: int8, the epilogue's ``scales`` dtype;
                          FP8, every block/row/tensor scale rounded to bf16
                          (``kernels.diagnose.rescale``)
``double_rounding``       the output rounded twice, first to 3 more fraction bits than the
                          output format keeps (TF32 for bfloat16), then to the output
``order_swapped``         int8, separate epilogue: the two scale multiplications in the other
                          order (``acc_sx_sw`` and ``acc_sw_sx`` swap; ``acc_sxsw`` becomes
                          ``acc_sx_sw``)
``truncation``            the output cast rounds toward zero instead of to nearest
``fused_vs_separate``     int8: a fused epilogue where the spec has a separate one, or the
                          reverse (separate in order ``acc_sw_sx``)
``int32_overflow``        int8: ``k_max`` raised to the first K whose sums can leave int32
                          (133145), the accumulator wrapping silently
``beyond_2_24``           int8: the products summed in float32 (in order, per split-K part,
                          parts joined in float32) instead of int32, exact only while every
                          partial sum stays within 2**24
``operand_mismatch``      the weight operand read one float32 ulp larger in magnitude
========================  ===================================================================

A fault *applies* to a spec when the spec has the thing it breaks (an epilogue for the int8
ones, a narrow output for the rounding ones, scales bfloat16 does not hold exactly for
``scale_bf16`` (not MX's powers of two), sums that can pass
2**24 for ``beyond_2_24``: with k_max·127² ≤ 2**24 float32 sums are exact, and summing in
float32 is no fault); ``applies`` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from kernel_contracts.contracts import MatmulSpec
from kernel_contracts.kernels._matmul import int8_matmul, matmul
from kernel_contracts.kernels._matmul.epilogue import apply_epilogue, epilogue_code
from kernel_contracts.kernels.diagnose.rescale import rescaled_matmul
from kernel_contracts.kernels.numerics.formats import cast_output_np, format_info
from kernel_contracts.kernels.numerics.scaling import quantize_rows_int8

__all__ = ["FAULTS", "Candidate", "Fault", "applies", "designed_check", "inject", "reference"]

MatmulImpl = Callable[[Float[Array, "m k"], Float[Array, "k n"], int], Float[Array, "m n"]]


class Candidate(NamedTuple):
    """An implementation under test: the spec it declares and how it computes."""

    spec: MatmulSpec
    matmul: MatmulImpl


class Fault(NamedTuple):
    name: str
    description: str


FAULTS = (
    Fault("null", "no change"),
    Fault("scale_bf16", "scales stored in bfloat16"),
    Fault("double_rounding", "output rounded twice (3 extra bits first)"),
    Fault("order_swapped", "epilogue scale multiplications in the other order"),
    Fault("truncation", "output rounded toward zero instead of to nearest"),
    Fault("fused_vs_separate", "epilogue fused where separate, or the reverse"),
    Fault("int32_overflow", "k_max past the int32 range, accumulator wraps"),
    Fault("beyond_2_24", "int8 products summed in float32 (exact only below 2^24)"),
    Fault("operand_mismatch", "weight operand one float32 ulp larger in magnitude"),
)
_NAMES = tuple(f.name for f in FAULTS)
OVERFLOW_K = 133_145  # the first K with K·127² > 2**31 − 1


def _narrow_output(spec: MatmulSpec) -> bool:
    return spec.output in ("bfloat16", "float16")


def _nearest_output(spec: MatmulSpec) -> bool:
    """The output is rounded to nearest (an int8 epilogue may round toward zero)."""
    return not spec.is_int8 or spec.epilogue.rounding == "nearest_even"


def applies(name: str, spec: MatmulSpec) -> bool:
    """Whether fault ``name`` can be put into an implementation of ``spec``."""
    if name not in _NAMES:
        raise ValueError(f"unknown fault {name!r}; expected one of {', '.join(_NAMES)}")
    int8 = spec.is_int8
    if name in ("null", "operand_mismatch"):
        return True
    if name == "scale_bf16":  # MX scales are powers of two, which bfloat16 holds exactly
        return (int8 and spec.epilogue.scales != "bfloat16") or (
            not int8 and format_info(spec.inputs).is_fp8 and spec.scaling.kind != "mx"
        )
    if name in ("double_rounding", "truncation"):
        return _narrow_output(spec) and _nearest_output(spec)
    if name == "order_swapped":
        return int8 and not spec.epilogue.fused
    if name == "beyond_2_24":  # float32 sums are exact unless some sum can pass 2**24
        return int8 and (spec.k_max or 0) * 127**2 > 2**24
    return int8  # fused_vs_separate, int32_overflow


def designed_check(name: str, spec: MatmulSpec) -> str:
    """The check designed to detect fault ``name`` in an implementation of ``spec``."""
    ties = spec.inputs in ("bfloat16", "float16") or spec.scaling.kind == "mx"
    boundaries = spec.is_int8 or _narrow_output(spec) or ties  # probes that can see a 1-ulp change
    return {
        "null": "",
        "scale_bf16": "max_ulp",
        "double_rounding": "bit_identity",
        "order_swapped": "rounding_boundaries",
        "truncation": "rounding_bias",
        "fused_vs_separate": "rounding_boundaries",
        "int32_overflow": "int8_exactness",
        "beyond_2_24": "int8_exactness",
        "operand_mismatch": "rounding_boundaries" if boundaries else "bit_identity",
    }[name]


# ------------------------------------------------------------------------ implementations


def _plain(spec: MatmulSpec) -> MatmulImpl:
    if spec.is_int8:  # the spec as data: one compiled program per shape serves every fault
        return lambda x, w, splits: int8_matmul(x, w, spec, specialize=False).y
    return lambda x, w, splits: matmul(x, w, spec, splits=splits)


def reference(spec: MatmulSpec) -> MatmulImpl:
    """The JAX implementation of ``spec`` (what ``inject("null", spec)`` runs)."""
    return _plain(spec)


def _round_bits(y: np.ndarray, bits: int) -> np.ndarray:
    """float32 ``y`` rounded to nearest-even at ``bits`` fraction bits, float32's range."""
    drop = 23 - bits
    b = np.asarray(y, np.float32).view(np.uint32)
    mag = b & np.uint32(0x7FFF_FFFF)
    lsb = (mag >> np.uint32(drop)) & np.uint32(1)
    half = np.uint32((1 << (drop - 1)) - 1)
    rounded = (mag + half + lsb) & np.uint32(~((1 << drop) - 1) & 0xFFFF_FFFF)
    rounded = np.where(mag >= 0x7F80_0000, mag, rounded)  # inf and NaN pass through
    return (rounded | (b & np.uint32(0x8000_0000))).view(np.float32)


def _truncate(y: np.ndarray, fmt: str) -> np.ndarray:
    """float32 ``y`` rounded toward zero to ``fmt`` (bfloat16 or float16), as float32: the
    nearest value, stepped one place toward zero where it has the larger magnitude (an
    overflow to inf becomes the largest finite value). Zeros are +0."""
    y = np.asarray(y, np.float32)
    if fmt == "bfloat16":  # float32's exponent range: drop the low 16 bits
        out = (y.view(np.uint32) & np.uint32(0xFFFF_0000)).view(np.float32)
        out = np.where(np.isnan(y), y, out)
    else:
        with np.errstate(over="ignore"):
            r = y.astype(np.float16)
        up = np.isfinite(y) & (np.abs(r.astype(np.float32)) > np.abs(y))
        out = np.where(up, np.nextafter(r, np.float16(0)), r).astype(np.float32)
    return np.where(out == 0, np.float32(0), out)


def _pre_output(spec: MatmulSpec) -> MatmulImpl:
    """The implementation of ``spec`` stopped before its output rounding (output float32)."""
    return _plain(replace(spec, output="float32"))


def _swapped(spec: MatmulSpec) -> MatmulSpec:
    order = {"acc_sx_sw": "acc_sw_sx", "acc_sw_sx": "acc_sx_sw", "acc_sxsw": "acc_sx_sw"}
    return replace(spec, epilogue=replace(spec.epilogue, order=order[spec.epilogue.order]))


def _toggled(spec: MatmulSpec) -> MatmulSpec:
    ep = spec.epilogue
    if ep.fused:
        return replace(spec, epilogue=replace(ep, fused=False, order="acc_sw_sx"))
    return replace(spec, epilogue=replace(ep, fused=True, order=None))


@partial(jax.jit, static_argnames=("per_tensor", "code"))
def _float32_sums(x, w, per_tensor: bool, code):
    scales = ("float32", "bfloat16", "float16")[code.scales]
    xq, sx = quantize_rows_int8(x, per_tensor, scales)
    wq, sw = quantize_rows_int8(w.T, per_tensor, scales)
    xq, wq = jnp.where(jnp.isnan(xq), 0.0, xq), jnp.where(jnp.isnan(wq), 0.0, wq)

    def step(i, acc):  # one exact product per output, added in float32 (rounded to nearest)
        return acc + xq[:, i, None] * wq[None, :, i]

    total = lax.fori_loop(0, x.shape[1], step, jnp.zeros((x.shape[0], w.shape[1]), jnp.float32))
    return apply_epilogue(total.astype(jnp.int64), sx, sw.T, code)


def _float32_accumulation(spec: MatmulSpec) -> MatmulImpl:
    code = epilogue_code(spec.epilogue, spec.output)

    def run(x, w, splits):
        with jax.enable_x64(True):
            x, w = jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32)
            return _float32_sums(x, w, spec.scaling.kind == "per_tensor", code)

    return run


def _away(w) -> np.ndarray:
    w = np.asarray(w, np.float32)
    return np.nextafter(w, np.where(w < 0, -np.inf, np.inf).astype(np.float32))


def inject(name: str, spec: MatmulSpec) -> Candidate:
    """The implementation of ``spec`` with fault ``name`` in it (``ValueError`` when the
    fault does not apply to ``spec``)."""
    if not applies(name, spec):
        raise ValueError(f"fault {name!r} does not apply to this spec")
    out = spec.output
    if name == "null":
        return Candidate(spec, _plain(spec))
    if name == "scale_bf16":
        if spec.is_int8:
            bf = replace(spec, epilogue=replace(spec.epilogue, scales="bfloat16"))
            return Candidate(spec, _plain(bf))
        return Candidate(spec, lambda x, w, s: rescaled_matmul(x, w, spec, "bfloat16", splits=s))
    if name == "double_rounding":
        pre = _pre_output(spec)
        bits = format_info(out).mantissa_bits + 3
        return Candidate(
            spec, lambda x, w, s: cast_output_np(_round_bits(np.asarray(pre(x, w, s)), bits), out)
        )
    if name == "truncation":
        pre = _pre_output(spec)
        return Candidate(spec, lambda x, w, s: _truncate(np.asarray(pre(x, w, s)), out))
    if name == "order_swapped":
        return Candidate(spec, _plain(_swapped(spec)))
    if name == "fused_vs_separate":
        return Candidate(spec, _plain(_toggled(spec)))
    if name == "int32_overflow":
        wide = replace(spec, k_max=max(OVERFLOW_K, spec.k_max or 0))
        return Candidate(wide, _plain(wide))
    if name == "beyond_2_24":
        return Candidate(spec, _float32_accumulation(spec))
    plain = _plain(spec)  # operand_mismatch
    return Candidate(spec, lambda x, w, s: plain(x, _away(w), s))
