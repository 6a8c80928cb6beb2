"""The fast paths of the pure-JAX matmul against the NumPy reference, bit for bit.

Each path the fused loop can take (binary32 chain with its data check and binary64 fallback,
binary64 with range-free rounding, exact group sums as batched dots, the transposed
orientation, tile padding, a vmapped batch) on operands built to hit its edges: subnormal and
tiny values, ties, overflow to inf, NaN, zero rows, K not a multiple of the group, the
promotion interval or the loop's block.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts import AccumulatorSpec, MatmulSpec, preset
from kernel_contracts.kernels._matmul import emulated_dot_general, make_plan, matmul
from kernel_contracts.kernels._matmul.fast import (
    _BLOCK,
    _schedule,
    binary32_exact,
    reduce_quantized,
    transposed,
)
from kernel_contracts.kernels._matmul.rounding import (
    round_accumulator,
    round_accumulator_in_range,
    round_accumulator_np,
)
from kernel_contracts.kernels.numerics.formats import cast_output
from kernel_contracts.kernels.numerics.scaling import quantize_cols, quantize_rows
from tests.support.bits import same_bits


def spec_of(inputs, scaling, m, rounding, group, promote, output="float32"):
    return MatmulSpec(
        inputs=inputs,
        scaling=scaling,
        accumulator=AccumulatorSpec(mantissa_bits=m, rounding=rounding),
        group=group,
        promote_every=promote,
        output=output,
    )


def operand_sets(shape, seed=0):
    """Operand pairs of one shape: spread exponents, NaN, a zero row, ties, huge and tiny."""
    m, k, n = shape
    rng = np.random.default_rng(seed)

    def spread(size, e):
        return (rng.standard_normal(size) * 2.0 ** rng.integers(-e, e + 1, size)).astype(np.float32)

    sets = [(spread((m, k), 3), spread((k, n), 3)), (spread((m, k), 20), spread((k, n), 20))]
    x, w = spread((m, k), 6), spread((k, n), 6)
    x[0, 1] = np.nan
    x[1] = 0.0
    sets.append((x, w))
    # ties: 1 + 2**-24 (and its like) rounds to even in a float32 accumulator
    x = np.ones((m, k), np.float32)
    x[:, 1::2] = 2.0**-24
    w = np.ones((k, n), np.float32)
    w[::3] = -1.0
    sets.append((x, w))
    # products of 2**126: their sums overflow the accumulator; tiny products far below 2**-126
    sets.append((np.full((m, k), 2.0**100, np.float32), np.full((k, n), 2.0**26, np.float32)))
    sets.append((spread((m, k), 2) * 2.0**-100, spread((k, n), 2) * 2.0**-30))
    return sets


def check(spec, shape, splits=1, sets=None):
    f = jax.jit(lambda a, b: matmul(a, b, spec, splits=splits))
    for x, w in sets or operand_sets(shape):
        want = matmul(x, w, spec, impl="numpy", splits=splits)
        got = f(x, w)
        assert same_bits(got, want), (spec, np.argwhere(np.asarray(got) != want)[:4])


# ---------------------------------------------------------------------------------------------
# rounding without range checks


@pytest.mark.parametrize("rz", [True, False])
def test_in_range_rounding_equals_the_full_rounding(rz):
    rng = np.random.default_rng(1)
    s = rng.standard_normal(4096) * 2.0 ** rng.integers(-126, 126, 4096)
    grid = np.ldexp(np.rint(np.ldexp(s, 20)), -20)  # many exact ties for small m
    s = np.concatenate([s, grid, [0.0, np.nan, 2.0**127, -(2.0**-126), 1 + 2.0**-24]])
    s = np.where(np.abs(s) < 2.0**-126, 2.0**-126, s)  # the documented range
    with jax.enable_x64(True):
        sj = jnp.asarray(s, jnp.float64)
        for m in (1, 4, 13, 22, 23):
            want = np.asarray(round_accumulator(sj, m, rz))
            got = np.asarray(round_accumulator_in_range(sj, m, rz))
            assert np.array_equal(got.view(np.uint64), want.view(np.uint64)) or (
                np.array_equal(np.isnan(got), np.isnan(want))
                and np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
            ), m


def test_float32_accumulator_rounding_at_its_edges():
    # round_accumulator with 23 bits to nearest goes through the binary32 conversion; the
    # subnormal range and the overflow threshold are where that could differ
    tiny, top = 2.0**-126, 2.0**127
    edges = [
        tiny, tiny - 2.0**-151, tiny - 2.0**-151 - 2.0**-170, tiny - 2.0**-150, 2.0**-127,
        2.0**-149, 2.0**-1074, 0.0, -0.0, (2 - 2.0**-24) * top, (2 - 2.0**-24) * top - 2.0**80,
        (2 - 2.0**-23) * top, 2.0**128, 1 + 2.0**-24, 1 + 3 * 2.0**-24, np.inf, np.nan,
    ]  # fmt: skip
    s = np.array(edges + [-e for e in edges], np.float64)
    want = round_accumulator_np(s, 23, False)
    with jax.enable_x64(True):
        got = np.asarray(round_accumulator(jnp.asarray(s), 23, False))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    assert np.array_equal(got[keep].view(np.uint64), want[keep].view(np.uint64))
    assert got[1] == tiny and got[2] == 0.0 and got[9] == np.inf and got[10] < np.inf


def test_plan_properties_of_the_presets():
    def props(name):
        p = make_plan(preset(name).matmul, 4096)
        return p.in_range, p.exact_group_sums, p.binary32_chain

    assert props("h100-fp8") == (True, True, False)
    assert props("mxfp8") == (True, True, False)
    assert props("bf16") == (False, False, True)
    assert props("fp32") == (False, False, False)
    e5m2 = make_plan(spec_of("float8_e5m2", "per_row", 23, "nearest_even", 1, None), 64)
    assert (e5m2.in_range, e5m2.exact_group_sums, e5m2.binary32_chain) == (True, False, True)


# ---------------------------------------------------------------------------------------------
# each path against the reference


def test_binary32_chain_with_its_check_and_fallback():
    spec = dataclasses.replace(preset("bf16").matmul, output="float32")
    sets = operand_sets((4, 37, 6))
    check(spec, None, sets=sets)
    check(spec, None, splits=3, sets=sets[:2])
    # the data check: which sets the float32 loop may take
    flags = []
    for x, w in sets:
        xq, _ = quantize_rows(jnp.asarray(x), "bfloat16", make_plan(spec, 37).scaling)
        wq, _ = quantize_rows(jnp.asarray(w).T, "bfloat16", make_plan(spec, 37).scaling)
        flags.append(bool(binary32_exact(xq, wq, "bfloat16")))
    assert flags == [True, True, False, True, True, False]  # NaN and tiny values fall back


def test_binary32_check_at_its_edges():
    one = jnp.ones((2, 3), jnp.float32)

    def ok(x, w):
        return bool(binary32_exact(x, w, "bfloat16"))

    assert ok(one, one) and ok(one * 0, one * 0) and ok(one.at[0, 0].set(0), one)
    # products are multiples of 2**(lx + lw - 14): 2**-126 is the last that never flushes
    assert ok(one * 2.0**-56, one * 2.0**-56) and not ok(one * 2.0**-57, one * 2.0**-56)
    # every product below 2**(hx + hw + 2)
    assert ok(-one * 2.0**63, one * 1.5 * 2.0**63) and not ok(one * 2.0**64, one * 2.0**63)
    for nan in (jnp.nan, -jnp.nan):  # a NaN of either sign fails, even with tiny partners
        assert not ok(one.at[0, 1].set(nan), one * 2.0**-10)
        assert not ok(one * 2.0**-10, one.at[1, 2].set(nan))


@pytest.mark.parametrize(
    "spec",
    [
        preset("h100-fp8").matmul,  # toward zero as a mask
        spec_of("float8_e5m2", "block:8", 10, "nearest_even", 3, 16),  # rounding by addition
        spec_of("float16", "per_tensor", 23, "nearest_even", 1, None),  # binary32, no check
        preset("mxfp8").matmul,  # group sums as batched binary64 dots
        spec_of("float8_e4m3fn", "per_row", 7, "toward_zero", 16, 48),  # dots and a chain
    ],
    ids=["h100-fp8", "e5m2-rn10", "float16-chain", "mxfp8-dot", "e4m3-dot-chain"],
)
def test_binary64_paths(spec):
    check(spec, (3, 70, 5))


def test_dot_path_with_whole_chunks_per_dot():
    """16-product chunks, two per batched dot (group sums of two chunks from one dot)."""
    spec = spec_of("float8_e4m3fn", "mx:32", 23, "nearest_even", 16, 16)
    sched = _schedule(make_plan(spec, 64), _BLOCK["dot"])
    assert (sched.chunks_per_iter, sched.iters) == (2, 2)
    check(spec, (3, 64, 5))


@pytest.mark.slow
def test_transposed_orientation_and_tile_padding():
    spec = dataclasses.replace(preset("h100-fp8").matmul, output="float32")
    # with w transposed (N × K): w broadcast and x streamed, the result transposed; with w as
    # given (K × N, what matmul passes) never
    assert transposed(128, 256, 512) and not transposed(127, 256, 512)
    assert not transposed(128, 256, 256) and not transposed(128, 256, 512, True)
    x, w = operand_sets((128, 256, 512), seed=2)[2]
    plan = make_plan(spec, 256, 2)
    want = matmul(x, w, spec, impl="numpy", splits=2)
    assert same_bits(jax.jit(lambda a, b: matmul(a, b, spec, splits=2))(x, w), want)
    with jax.enable_x64(True):
        xq, sx = quantize_rows(jnp.asarray(x), plan.inputs, plan.scaling)
        wq, sw = quantize_rows(jnp.asarray(w).T, plan.inputs, plan.scaling)
        got = cast_output(
            jax.jit(reduce_quantized, static_argnums=4)(xq, sx, wq, sw, plan), "float32"
        )
    assert same_bits(got, want)
    # tiles that do not divide the output, w in either layout
    plan = make_plan(spec, 37)
    x, w = operand_sets((7, 37, 11), seed=3)[1]
    want = matmul(x, w, spec, impl="numpy")

    @jax.jit
    def both(a, b):  # w transposed, and w as given
        xq, sx = quantize_rows(a, plan.inputs, plan.scaling)
        wq, sw = quantize_rows(b.T, plan.inputs, plan.scaling)
        nk = reduce_quantized(xq, sx, wq, sw, plan, tile_m=3, tile_n=4)
        wq, sw = quantize_cols(b, plan.inputs, plan.scaling)
        kn = reduce_quantized(xq, sx, wq, sw, plan, w_k_leading=True, tile_m=3, tile_n=4)
        return cast_output(nk, "float32"), cast_output(kn, "float32")

    with jax.enable_x64(True):
        got_nk, got_kn = both(x, w)
    assert same_bits(got_nk, want)
    assert same_bits(got_kn, want)


def test_quantize_cols_is_quantize_rows_transposed():
    """w is quantized in its own layout; the bits are those of quantizing w.T by rows."""
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((70, 45)) * 2.0 ** rng.integers(-40, 40, (70, 45))).astype(np.float32)
    a[3, 4], a[40, 7], a[5, 10], a[:, 9] = np.nan, np.inf, 1e-40, 0.0
    cases = [("float8_e4m3fn", t) for t in ("per_tensor", "per_row", "block:16", "block:128")]
    cases += [("float8_e5m2", "mx:32"), ("bfloat16", "per_tensor")]
    scalings = [make_plan(spec_of(f, t, 23, "nearest_even", 1, None), 70).scaling for f, t in cases]

    @jax.jit
    def both(a):  # one compilation for all cases
        return [
            (quantize_rows(a.T, f, sc), quantize_cols(a, f, sc))
            for (f, _), sc in zip(cases, scalings, strict=True)
        ]

    for case, (rows, cols) in zip(cases, both(jnp.asarray(a)), strict=True):
        assert same_bits(np.asarray(rows[0]).T, cols[0]), case
        assert same_bits(np.asarray(rows[1]).T, cols[1]), case


def test_vmapped_batch_keeps_one_branch():
    spec = dataclasses.replace(preset("bf16").matmul, output="float32")
    sets = operand_sets((3, 20, 4), seed=4)
    lhs = np.stack([sets[0][0], sets[5][0]])  # the second element fails the data check
    rhs = np.stack([sets[0][1], sets[5][1]])
    dn = (((2,), (1,)), ((0,), (0,)))

    def f(a, b):
        return emulated_dot_general(a, b, dn, spec)

    want = np.stack([matmul(lhs[i], rhs[i], spec, impl="numpy") for i in range(2)])
    assert same_bits(jax.jit(f)(lhs, rhs), want)
    with jax.enable_x64(True):
        text = str(jax.make_jaxpr(f)(lhs, rhs))
    assert "cond[" in text  # the batch shares one predicate: no select of both branches
