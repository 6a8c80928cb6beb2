"""A priori logit drift from kernel specs: rounding-error bounds for the LM-head matmul.

The arithmetic follows ``contracts.MatmulSpec`` (DESIGN §7): inputs scaled in binary32 and
cast to ``inputs`` (round to nearest; nothing saturates or underflows); exact products; each
group of ``group`` products summed in binary64 and added to a running accumulator of
``mantissa_bits`` bits, rounded once (``rounding``); every ``promote_every`` elements (or
scale block) the partial sum joins a binary32 sum; scales applied in binary32; the result cast
to ``output``. Each term of y = Σ x_i w_i reaches ŷ through the chain of roundings listed in
``MatmulError.steps``, so ŷ − y = Σ x_i w_i (Π_j (1 + δ_ij) − 1) and
|ŷ − y| ≤ θ·Σ|x_i w_i| ≤ θ·‖x‖₂·‖w‖₂.

- Deterministic (worst case, block-FMA style): θ = Π_steps (1 + γ_m(u)) − 1 with
  γ_m(u) = m·u/(1 − m·u).
- Probabilistic (√n type): the rounding errors δ_ij of round-to-nearest steps are modelled as
  independent with mean zero; then |Σ_j log(1 + δ_ij)| ≤ t + Σ_j u_j²/(2(1 − u_j)) except with
  probability 2·exp(−2t²/Σ_j w_j²), w_j = log((1 + u_j)/(1 − u_j)) (Hoeffding), union-bounded
  over every term and output. Round-toward-zero errors all have the sign of −x, so they are not
  mean-zero: those steps always keep the deterministic factor.

Int8 kernels (``spec.is_int8``; ``kernels._matmul``, "Int8 inputs"): products and sums are
exact integers, so θ covers only the epilogue's roundings: the multiplications by the scales
(two float32 roundings, or one fused rounding) and the output cast, plus the int32 → float32
conversion when K·127² > 2^24 (below that it is exact, and the epilogue is the only source of
divergence); θ = ∞ when K·127² > 2^31 − 1 (the accumulator can wrap). θ is relative to
Σ|x̂_i ŵ_i|, the dequantized operands q·ŝ. Their distance from the kernel's float operands is
the quantization error, absolute rather than relative: per element |x − q·ŝ| ≤ c·‖x‖∞ with
c = 2u + u² + ½(1 + u)²(1 + u_s)/127 (u = 2^-24, u_s the scale dtype's unit roundoff), which
``apriori_logit_drift`` adds as x_norm·w_norm·c·(2√K + K·c), and Σ|x̂_i ŵ_i| ≤
x_norm·w_norm·(1 + √K·c)².

References:
    Higham, "Accuracy and Stability of Numerical Algorithms" (2nd ed., 2002), §3.1 (γ_n).
    Blanchard, Higham, Lopez, Mary & Pranesh, "Mixed precision block fused multiply-add",
        SIAM J. Sci. Comput. 42 (2020).
    Higham & Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci.
        Comput. 41 (2019).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from kernel_contracts.contracts import FLOAT_FORMATS, INT_FORMATS, MatmulSpec

__all__ = [
    "DriftBound",
    "MatmulError",
    "apriori_logit_drift",
    "matmul_error",
    "unit_roundoff",
]

_FP32_U = 2.0**-24

Model = Literal["deterministic", "probabilistic"]

_ASSUMPTIONS = (
    "inputs are cast with round-to-nearest after scaling; no value saturates or falls into the "
    "subnormal range (scale factors are powers of two and exact)",
    "products are exact; each group of `group` products is summed in binary64 and rounded "
    "once into the accumulator; binary64 and binary32 sums round to nearest",
    "the reference is the exact product of the kernel's (unquantised) operands; upstream "
    "layers are out of scope (this bounds one matmul)",
)
_PROB_ASSUMPTION = (
    "probabilistic model: round-to-nearest errors are independent with mean zero (a model, "
    "exact for stochastic rounding); round-toward-zero steps are biased and keep the "
    "deterministic bound"
)


def unit_roundoff(mantissa_bits: int, rounding: str = "nearest_even") -> float:
    """Largest relative rounding error: 2^{−(p+1)} to nearest, 2^{−p} toward zero."""
    if mantissa_bits < 1:
        raise ValueError("mantissa_bits must be ≥ 1")
    if rounding == "nearest_even":
        return 2.0 ** -(mantissa_bits + 1)
    if rounding == "toward_zero":
        return 2.0**-mantissa_bits
    raise ValueError(f"unknown rounding {rounding!r}")


def _format_u(fmt: str, rounding: str = "nearest_even") -> float:
    """The unit roundoff of a cast to float format ``fmt`` (``contracts.formats``)."""
    return unit_roundoff(FLOAT_FORMATS[fmt].mantissa_bits, rounding)


def _gamma(m: int, u: float) -> float:
    return math.inf if m * u >= 1 else m * u / (1 - m * u)


@dataclass(frozen=True)
class MatmulError:
    """|ŷ − y| ≤ relative·Σ|x_i w_i| for every output of one K-long dot product."""

    relative: float
    model: Model
    k: int
    steps: tuple[tuple[str, int, float, bool], ...]  # (stage, roundings, unit roundoff, RN?)
    confidence: float | None  # probabilistic only: P(the bound holds for all outputs)
    assumptions: tuple[str, ...]
    # int8: relative is against Σ|x̂_i ŵ_i| (dequantized operands), and each operand is within
    # quantization·‖·‖∞ of the float one, per element (0 for float kernels)
    quantization: float = 0.0

    def against_norms(self) -> float:
        """The factor f with |ŷ − y| ≤ f·‖x‖₂·‖w‖₂ against the exact float product y."""
        c, r = self.quantization, math.sqrt(self.k)
        return self.relative * (1 + r * c) ** 2 + c * (2 * r + self.k * c)


def _steps(spec: MatmulSpec, k: int, splits: int) -> tuple[tuple[str, int, float, bool], ...]:
    """Every rounding on the path of one product into the output, by stage (worst path)."""
    u_in = 0.0 if spec.inputs == "float32" else _format_u(spec.inputs)
    acc = spec.accumulator
    u_acc = unit_roundoff(acc.mantissa_bits, acc.rounding)
    chunk = k if spec.promote_every is None else min(spec.promote_every, k)
    scaling = spec.scaling
    blocked = scaling.varies_along_k
    if blocked:  # a chunk never straddles a scale block
        chunk = min(chunk, scaling.block)
    group = max(spec.group, 1)
    m_acc = math.ceil(min(chunk, k) / group)
    narrow_out = spec.output != "float32"
    u_out = _format_u(spec.output) if narrow_out else 0.0
    return (
        ("input cast", 2 if u_in else 0, u_in, True),
        # x/s and w/s formed in binary32 before the cast; the scale product and its application
        ("scale arithmetic (binary32)", 2 + (2 if blocked else 0) + 2, _FP32_U, True),
        ("group and accumulator sums (binary64)", group - 1 + m_acc, 2.0**-53, True),
        ("accumulator", m_acc, u_acc, acc.rounding == "nearest_even"),
        ("chunk sums (binary32)", math.ceil(k / chunk) + max(splits, 1), _FP32_U, True),
        ("output cast", 1 if u_out else 0, u_out, True),
    )


def matmul_error(
    spec: MatmulSpec,
    k: int,
    *,
    model: Model = "deterministic",
    confidence: float = 0.99,
    outputs: int = 1,
    splits: int = 1,
) -> MatmulError:
    """The relative error factor θ of one length-``k`` dot product computed as ``spec`` says.

    ``outputs`` is how many dot products the probabilistic bound must cover at once (the
    vocabulary size for a logit drift); it enters only through the union bound. ``splits``
    is the number of split-K parts whose binary32 sums are joined at the end.
    """
    if k < 1:
        raise ValueError("k must be ≥ 1")
    if spec.is_int8:
        return _int8_error(spec, k, model)
    steps = _steps(spec, k, splits)
    det = 1.0
    for _, m, u, _rn in steps:
        det *= 1 + _gamma(m, u)
    if model == "deterministic":
        return MatmulError(det - 1, model, k, steps, None, _ASSUMPTIONS)
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie in (0, 1)")
    biased = 1.0
    width2 = bias = 0.0
    for _, m, u, rn in steps:
        if m == 0:
            continue
        if rn:
            width2 += m * math.log((1 + u) / (1 - u)) ** 2
            bias += m * u * u / (2 * (1 - u))
        else:
            biased *= 1 + _gamma(m, u)
    beta = (1 - confidence) / (k * outputs)  # union over every term of every output
    t = math.sqrt(width2 * math.log(2 / beta) / 2)
    prob = math.exp(t + bias) * biased - 1
    return MatmulError(
        min(prob, det - 1), model, k, steps, confidence, (*_ASSUMPTIONS, _PROB_ASSUMPTION)
    )


_INT8_MAX = INT_FORMATS["int8"].qmax
_INT8_ASSUMPTIONS = (
    "int8: symmetric values in [-127, 127], scales s = amax/127 stored in the scale dtype "
    "without saturating or leaving its normal range; the epilogue's results stay normal",
    "int8: the reference of `relative` is Σ q_x·q_w·ŝ_x·ŝ_w (the dequantized operands); "
    "`quantization` bounds each operand's distance from the float one",
    "int8: the epilogue's few roundings keep the deterministic factor in either model",
)


def _int8_steps(spec: MatmulSpec, k: int) -> tuple[tuple[str, int, float, bool], ...]:
    ep = spec.epilogue
    rn = ep.rounding == "nearest_even"
    exact_convert = k * _INT8_MAX**2 <= 2**24
    u_mul = unit_roundoff(23, ep.rounding)
    u_out = _format_u(spec.output, ep.rounding)
    narrow = spec.output != "float32"
    return (
        ("int32 accumulation (exact)", 0, 0.0, True),
        ("int32 → float32 conversion", 0 if exact_convert else 1, _FP32_U, True),
        ("epilogue: one fused rounding", 1 if ep.fused else 0, u_out, rn),
        ("epilogue: scale multiplications (float32)", 0 if ep.fused else 2, u_mul, rn),
        ("epilogue: output cast", 1 if narrow and not ep.fused else 0, u_out, rn),
    )


def _int8_error(spec: MatmulSpec, k: int, model: Model) -> MatmulError:
    """θ of an int8 matmul: the epilogue's roundings only (module docstring)."""
    steps = _int8_steps(spec, k)
    u_s = 0.0 if spec.epilogue.scales == "float32" else _format_u(spec.epilogue.scales)
    c = 2 * _FP32_U + _FP32_U**2 + 0.5 * (1 + _FP32_U) ** 2 * (1 + u_s) / _INT8_MAX
    if k * _INT8_MAX**2 > 2**31 - 1:  # some inputs wrap the accumulator: nothing is bounded
        note = "int8: K·127² > 2^31 − 1: the int32 accumulator can wrap, so no bound holds"
        return MatmulError(math.inf, model, k, steps, None, (*_INT8_ASSUMPTIONS, note), c)
    det = 1.0
    for _, m, u, _rn in steps:
        det *= 1 + _gamma(m, u)
    notes = _INT8_ASSUMPTIONS
    if spec.scaling.kind == "per_tensor":  # one scale: the tensor's largest value sets it
        notes += (
            "int8 per_tensor: x_norm and w_norm must also bound the largest |value| of the "
            "whole tensor, which sets the shared scale",
        )
    return MatmulError(det - 1, model, k, steps, None, notes, c)


@dataclass(frozen=True)
class DriftBound:
    """‖z_train − z_inf‖∞ ≤ delta, from both kernels' errors against the exact product."""

    delta: float
    train: MatmulError
    inference: MatmulError
    x_norm: float
    w_norm: float
    model: Model
    confidence: float | None


def apriori_logit_drift(
    train: MatmulSpec,
    inference: MatmulSpec,
    k: int,
    x_norm: float,
    w_norm: float,
    *,
    model: Model = "deterministic",
    confidence: float = 0.99,
    vocab_size: int = 1,
) -> DriftBound:
    """A bound on the LM head's logit drift: (θ_train + θ_inf)·‖x‖₂·max_j ‖W_{:, j}‖₂, where
    an int8 side contributes ``MatmulError.against_norms()`` (its epilogue and its
    quantization) instead of θ.

    ``x_norm`` bounds the ℓ2 norm of the final hidden state and ``w_norm`` the ℓ2 norm of
    every LM-head column, so Σ_i |x_i W_ij| ≤ x_norm·w_norm by Cauchy–Schwarz. In the
    probabilistic model each kernel gets half of the failure probability.
    """
    if not (x_norm >= 0 and w_norm >= 0 and math.isfinite(x_norm * w_norm)):
        raise ValueError("x_norm and w_norm must be finite and ≥ 0")
    conf = 1 - (1 - confidence) / 2
    kw = {"model": model, "confidence": conf, "outputs": vocab_size}
    et, ei = matmul_error(train, k, **kw), matmul_error(inference, k, **kw)
    return DriftBound(
        delta=(et.against_norms() + ei.against_norms()) * x_norm * w_norm,
        train=et,
        inference=ei,
        x_norm=x_norm,
        w_norm=w_norm,
        model=model,
        confidence=confidence if model == "probabilistic" else None,
    )
