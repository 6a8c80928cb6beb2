"""The binary64 sums of the definition against exact rational arithmetic.

The package docstring claims the binary64 group sums are the exact real sums for e4m3 inputs
(within its bound on the chunk length). Here an independent oracle evaluates the definition with
every group sum taken in ``fractions.Fraction`` and rounded exactly; e4m3 must match bit for
bit, and the test reports how the wider formats compare.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from kernel_contracts.contracts import AccumulatorSpec, MatmulSpec, preset
from kernel_contracts.kernels._matmul import make_plan, matmul
from kernel_contracts.kernels.numerics.formats import cast_output_np, flush_np
from kernel_contracts.kernels.numerics.scaling import quantize_rows_np


def round_exact(v: Fraction, m: int, toward_zero: bool) -> float:
    """The accumulator rounding of an exact rational (no binary64 anywhere)."""
    if v == 0:
        return 0.0
    sign = -1 if v < 0 else 1
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (e - m)  # last place
    n, r = divmod(a, q)
    if not toward_zero and (r > q / 2 or (r == q / 2 and n % 2 == 1)):
        n += 1
    out = n * q
    if out >= Fraction(2) ** 128:
        return sign * (float("inf") if not toward_zero else (2 - 2.0**-m) * 2.0**127)
    if out < Fraction(2) ** -126:
        return 0.0
    return sign * float(out)


def oracle(x, w, spec, splits=1):
    """The definition with exact group sums (finite inputs only)."""
    plan = make_plan(spec, x.shape[1], splits)
    xq, sx = quantize_rows_np(x, plan.inputs, plan.scaling)
    wq, sw = quantize_rows_np(w.T, plan.inputs, plan.scaling)
    m, n = xq.shape[0], wq.shape[0]
    out = np.zeros((m, n), np.float32)
    runs = plan.chunk_runs()
    for r in range(m):
        for c in range(n):
            total = np.float32(0)
            for p in range(plan.parts):
                part = np.float32(0)
                for ch in range(plan.chunks):
                    start = p * plan.part_len + ch * plan.chunk_len
                    stop = min(start + plan.chunk_len, plan.k)
                    acc = 0.0
                    for g0 in range(start, max(start, stop), plan.group):
                        t = sum(
                            Fraction(float(xq[r, k])) * Fraction(float(wq[c, k]))
                            for k in range(g0, min(g0 + plan.group, stop))
                        )
                        acc = round_exact(Fraction(acc) + t, plan.mantissa_bits, plan.toward_zero)
                    term = np.float32(acc)
                    if plan.block_scaled:
                        run = runs[p, ch]
                        scale = flush_np(np.float32(float(sx[r, run]) * float(sw[c, run])))
                        term = flush_np(np.float32(float(term) * float(scale)))
                    part = flush_np(part + term)
                total = flush_np(total + part)
            if not plan.block_scaled:
                scale = flush_np(np.float32(float(sx[r, 0]) * float(sw[c, 0])))
                total = flush_np(np.float32(float(total) * float(scale)))
            out[r, c] = total
    return cast_output_np(out, plan.output)


def spec_of(inputs, scaling, m, rounding, group, promote):
    return MatmulSpec(
        inputs=inputs,
        scaling=scaling,
        accumulator=AccumulatorSpec(m, rounding),
        group=group,
        promote_every=promote,
        output="float32",
    )


@pytest.mark.parametrize(
    "spec",
    [
        preset("h100-fp8").matmul,
        dataclasses.replace(preset("h100-fp8-fast-accum").matmul, output="float32"),
        preset("mxfp8").matmul,
        spec_of("float8_e4m3fn", "per_row", 4, "nearest_even", 3, None),
        spec_of("float8_e4m3fn", "block:16", 2, "toward_zero", 5, 16),
    ],
    ids=["h100-fp8", "fast-accum", "mxfp8", "rn-m4-g3", "rz-m2-g5"],
)
def test_e4m3_binary64_sums_are_exact(spec):
    rng = np.random.default_rng(7)
    # wide dynamic range inside each row, so sums mix large and tiny products
    x = (rng.standard_normal((3, 200)) * 2.0 ** rng.integers(-12, 12, (3, 200))).astype(np.float32)
    w = (rng.standard_normal((200, 2)) * 2.0 ** rng.integers(-12, 12, (200, 2))).astype(np.float32)
    for splits in (1, 3):
        want = oracle(x, w, spec, splits)
        got = matmul(x, w, spec, impl="numpy", splits=splits)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_wider_formats_against_exact_sums():
    # binary64 sums of bf16/fp16 products are exact unless the terms span > 53 bits; with
    # moderate dynamic range they are, so the definition matches the exact one bit for bit
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 96)) * 2.0 ** rng.integers(-6, 6, (3, 96))).astype(np.float32)
    w = rng.standard_normal((96, 2)).astype(np.float32)
    for inputs in ("bfloat16", "float16"):
        for rounding in ("nearest_even", "toward_zero"):
            spec = spec_of(inputs, "per_tensor", 13, rounding, 4, None)
            want = oracle(x, w, spec)
            got = matmul(x, w, spec, impl="numpy")
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # a span beyond 53 bits: the binary64 sum drops the tiny term; toward-zero rounding of the
    # exact sum would step down one place. This is the documented deviation.
    x = np.array([[1.0, 2.0**-60]], np.float32)
    w = np.array([[1.0], [-1.0]], np.float32)
    spec = spec_of("float32", "per_tensor", 10, "toward_zero", 2, None)
    assert oracle(x, w, spec)[0, 0] == np.float32(1 - 2.0**-11)
    assert matmul(x, w, spec, impl="numpy")[0, 0] == 1.0
