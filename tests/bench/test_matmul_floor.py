"""The matmul's arithmetic floor (``bench/bench_matmul_floor.py``): operations counted in the
kernel's own functions, and the fraction of native bfloat16 they allow at published rates."""

from __future__ import annotations

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from tests.bench.support import bench_module

floor = bench_module("bench_matmul_floor")


def test_operations_are_counted_per_pipe():
    def f(a, b):
        bits = lax.bitcast_convert_type(a, jnp.int64) & jnp.int64(7)  # free, then 2 int32
        small = bits.astype(jnp.int32) > 0  # a conversion and a compare: 1 + 1 int32
        return bits, (a + b).astype(jnp.float32), small  # 1 fp64, then 1 fp32

    s = jax.ShapeDtypeStruct((), np.float64)
    ops = floor.pipe_ops(f, s, s)
    assert ops == {"fp64": 1.0, "fp64_tensor": 0.0, "fp32": 1.0, "int32": 4.0}


def test_small_groups_per_lane_are_bound_by_the_fp64_multiply_adds():
    # fast accumulation: one binary64 multiply-add per product, one 64-bit and per group of 4
    # (two 32-bit operations), no promotion: 17 T / 494.75 T of native bfloat16
    fast = floor.floor_of("h100-fp8-fast-accum")
    assert fast.variant == "fma64" and fast.bound == "fp64"
    assert fast.ops["fp64"] == 1.0 and fast.ops["int32"] == 0.5
    assert fast.fraction == pytest.approx(17.0 / 494.75, rel=1e-3)
    # promotion every 128 adds its own operations, still under the multiply-adds
    fp8 = floor.floor_of("h100-fp8")
    assert fp8.bound == "fp64" and 1.0 < fp8.ops["fp64"] < 1.1
    assert fp8.fraction < fast.fraction


def test_per_lane_sums_have_twice_the_floor_of_the_masked_dots():
    lanes, masked = floor.floor_of("h100-fp8"), floor.floor_of("h100-fp8", "dot")
    assert masked.ops["fp64_tensor"] == 4.0 and masked.bound == "fp64_tensor"
    assert masked.fraction == pytest.approx(33.5 / 4 / 494.75, rel=1e-6)
    assert lanes.fraction / masked.fraction == pytest.approx(1.91, abs=0.01)


def test_the_binary32_chain_is_one_fp32_multiply_add_per_product():
    bf16 = floor.floor_of("bf16")
    assert (bf16.variant, bf16.bound) == ("fma32", "fp32")
    assert bf16.fraction == pytest.approx(33.5 / 494.75, rel=1e-3)


def test_the_script_prints_the_table():
    out = io.StringIO()
    assert floor.main([], stdout=out) == 0
    rows = out.getvalue().splitlines()
    assert rows[0].startswith("| preset | variant |") and len(rows) == 2 + len(floor.PRESETS) + 1
    assert floor.main(["--x"], stdout=io.StringIO(), stderr=io.StringIO()) == 2
