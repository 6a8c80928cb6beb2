"""A priori drift: the rounding-error bound holds for the project's own emulated matmul."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernel_contracts.bounds import apriori_logit_drift, matmul_error, unit_roundoff
from kernel_contracts.contracts import MatmulSpec, preset

PRESETS = ("fp32", "bf16", "h100-fp8", "h100-fp8-fast-accum", "mxfp8")


def test_unit_roundoff():
    assert unit_roundoff(23) == 2.0**-24
    assert unit_roundoff(13, "toward_zero") == 2.0**-13
    with pytest.raises(ValueError, match="rounding"):
        unit_roundoff(7, "up")


def _exact(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w for float32-valued inputs: binary64 products are exact, fsum rounds once."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    return np.array(
        [[math.fsum(x64[i] * w64[:, j]) for j in range(w.shape[1])] for i in range(x.shape[0])]
    )


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_deterministic_bound_holds_for_emulated_matmul(name, signs):
    """Magnitudes in [0.5, 1] keep every scaled value normal (the stated assumption)."""
    matmul = pytest.importorskip("kernel_contracts.kernels._matmul").matmul_reference
    rng = np.random.default_rng(0)
    k = 1024
    x = rng.uniform(0.5, 1.0, (4, k)).astype(np.float32)
    w = rng.uniform(0.5, 1.0, (k, 8)).astype(np.float32)
    if signs == "mixed":
        x *= rng.choice([-1.0, 1.0], x.shape).astype(np.float32)
        w *= rng.choice([-1.0, 1.0], w.shape).astype(np.float32)
    spec = preset(name).matmul
    got = np.asarray(matmul(x, w, spec), dtype=np.float64)
    err = np.abs(got - _exact(x, w))
    scale = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64))
    theta = matmul_error(spec, k).relative
    assert np.all(err <= theta * scale), (name, float(np.max(err / scale)), theta)


def test_truncating_accumulator_bound_is_within_a_small_factor():
    """Positive terms, a 13-bit truncating accumulator, no quantization: every rounding loses
    up to u of a partial sum that grows linearly, so the loss averages about m·u/4 against the
    worst case γ_m(u) ≈ m·u: the bound must be within a factor 8 of what happens."""
    matmul = pytest.importorskip("kernel_contracts.kernels._matmul").matmul_reference
    from kernel_contracts.contracts import AccumulatorSpec

    spec = MatmulSpec(
        inputs="float32",
        accumulator=AccumulatorSpec(mantissa_bits=13, rounding="toward_zero"),
        group=4,
    )
    rng = np.random.default_rng(1)
    k = 2048
    x = rng.uniform(0.5, 1.0, (2, k)).astype(np.float32)
    w = rng.uniform(0.5, 1.0, (k, 4)).astype(np.float32)
    err = np.abs(np.asarray(matmul(x, w, spec), dtype=np.float64) - _exact(x, w))
    rel = float(np.max(err / (x.astype(np.float64) @ w.astype(np.float64))))
    theta = matmul_error(spec, k).relative
    assert theta / 8 <= rel <= theta


def test_probabilistic_bound_gains_on_long_round_to_nearest_sums():
    spec = MatmulSpec(inputs="float32")  # fp32 accumulation of K products, no quantization
    det = matmul_error(spec, 1 << 16).relative
    prob = matmul_error(spec, 1 << 16, model="probabilistic", outputs=32000).relative
    assert prob < det / 5


def test_round_toward_zero_keeps_the_deterministic_factor():
    spec = preset("h100-fp8-fast-accum").matmul
    det = matmul_error(spec, 4096)
    prob = matmul_error(spec, 4096, model="probabilistic", outputs=32000)
    assert prob.relative == pytest.approx(det.relative, rel=0.05)  # RZ dominates: no √n gain
    assert any("round-toward-zero" in a for a in prob.assumptions)


def test_promotion_tightens_the_fp8_bound():
    fast = matmul_error(preset("h100-fp8-fast-accum").matmul, 4096).relative
    promoted = matmul_error(preset("h100-fp8").matmul, 4096).relative
    assert promoted < fast


def test_logit_drift_from_norms():
    b = apriori_logit_drift(preset("fp32").matmul, preset("h100-fp8").matmul, 4096, 30.0, 2.0)
    assert b.delta == pytest.approx((b.train.relative + b.inference.relative) * 60.0)
    with pytest.raises(ValueError, match="x_norm"):
        apriori_logit_drift(preset("fp32").matmul, preset("bf16").matmul, 8, -1.0, 1.0)
