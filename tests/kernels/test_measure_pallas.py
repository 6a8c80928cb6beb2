"""The chunked Pallas measurement kernel (kernels.measurement.measure_pallas), run with
interpret=True: its columns against float64 (and 40-digit arithmetic where float64 cancels) and
against the host pass, over several vocabulary chunks and row blocks (overlapping last ones
included), on peaked, flat and strongly drifting rows; its flags and the JAX path's values for the
rows it flags; with and without jit; and ``kernels.measure``'s routing to it."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.kernels.measurement._measure import COLUMNS, measure
from kernel_contracts.kernels.measurement.measure_pallas import measure_rows
from kernel_contracts.kernels.numerics.castlint import erasable_casts
from tests.kernels.test_measure_fused import _assert_close, _exact, _reference

# 16 rows x 4096 logits in chunks of 1024 (four chunks), blocks of 4 rows, 3 persistent
# programs (the third walks one block, the others two; one compiled program for these tests)
OPTIONS = {"chunk": 1024, "block_rows": 4, "programs": 3}


def _pallas(z, zp, y, temperature, **options):
    out, flags = measure_rows(
        z, zp, y, np.float32(1.0 / temperature), interpret=True, **{**OPTIONS, **options}
    )
    return {k: np.asarray(v) for k, v in out.items()}, np.asarray(flags)


def _host(z, zp, y, temperature):
    return {
        k: np.asarray(v, np.float64) for k, v in measure(z, zp, y, temperature, impl="cpu").items()
    }


def _rows_of_every_kind(rng, drift):
    z = (rng.normal(size=(16, 4096)) * 3).astype(np.float32)
    z[0] *= 0.003  # flat
    z[1, 3000] += 30.0  # peaked, its maximum in the last chunk
    z[2, 5] += 25.0  # peaked, in the first
    z[3] *= 6.0  # sharp
    zp = (z + rng.normal(size=z.shape) * drift).astype(np.float32)
    return z, zp, rng.integers(0, 4096, 16)


@pytest.mark.parametrize(("drift", "temperature"), [(0.05, 1.0), (0.8, 0.7)])
def test_columns_match_float64_and_the_host_pass(drift, temperature):
    """|u| below ½ (the series) and beyond 1 (the exponential of log e + u), peaked and flat rows,
    maxima in the first and the last chunk."""
    rng = np.random.default_rng(int(drift * 100))
    z, zp, y = _rows_of_every_kind(rng, drift)
    got, flags = _pallas(z, zp, y, temperature)
    assert not flags.any()
    _assert_close(got, _reference(z, zp, y, temperature), temperature)
    _assert_close(got, _host(z, zp, y, temperature), temperature)
    if drift > 0.5:  # the large-drift branches ran
        assert np.max(got["logit_oscillation"]) / temperature > 2.0


def test_large_common_drift_keeps_relative_accuracy():
    """Δ = 0.75 + 1e-6 noise: the divergences are those of the noise alone (40 digits)."""
    rng = np.random.default_rng(9)
    z = (rng.normal(size=(16, 4096)) * 2).astype(np.float32)
    zp = (z + 0.75 + rng.normal(size=z.shape) * 1e-6).astype(np.float32)
    got, flags = _pallas(z, zp, np.zeros(16, int), 0.9)
    assert not flags.any()
    for i in (0, 7):
        for key, value in _exact(z[i, :], zp[i, :], 0.9).items():
            assert abs(got[key][i] - float(value)) <= 5e-6 * float(value), (key, i)


def test_ragged_shapes_overlap_without_double_counting():
    """13 rows in blocks of 4 (the last block starts at row 9) and 3000 logits in chunks of 1024
    (the last starts at 1976 and counts only from 2048): a maximum inside the overlap is counted
    once (its margin is the true one), and a tie across chunks goes to the first index."""
    rng = np.random.default_rng(3)
    z = (rng.normal(size=(13, 3000)) * 3).astype(np.float32)
    zp = (z + rng.normal(size=z.shape) * 0.05).astype(np.float32)
    z[0, 2000], z[0, 2001] = 20.0, 19.0  # in the overlap: margin 1, not 0
    zp[0, 2000] = 20.0
    z[1, [2000, 2900]] = 20.0  # a tie: 2000 wins; z' breaks it the other way: a flip
    zp[1, [2000, 2900]] = [20.0, 20.5]
    z[2, [100, 2050]] = 20.0  # a tie across the first and the last chunk; z' keeps it
    zp[2, [100, 2050]] = 20.0
    y = rng.integers(0, 3000, 13)
    got, flags = _pallas(z, zp, y, 1.0)
    assert not flags.any()
    np.testing.assert_array_equal(got["margin"][:3], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(got["top1_flip"][:3], [0.0, 1.0, 0.0])
    _assert_close(got, _reference(z, zp, y, 1.0), 1.0)


def _awkward():
    """Rows the kernel leaves to the JAX path (1, 2, 4, 5, 6) and rows it keeps (0, 3, 7)."""
    rng = np.random.default_rng(5)
    z = (rng.normal(size=(8, 2048)) * 2).astype(np.float32)
    zp = (z + rng.normal(size=z.shape) * 0.1).astype(np.float32)
    z[0, 10:20] = zp[0, 10:20] = -np.inf  # masked by both: drops out
    zp[1, 7] = -np.inf  # masked by K_inf only
    z[2, 9] = -np.inf  # masked by K_train only
    z[3, 4] = zp[3, 4] = -np.inf  # the observed token masked by both: log_ratio NaN
    zp[4, 3] = z[4, 3] + 40.0  # u beyond the fast range
    z[5, 11] = np.nan
    z[6] = zp[6] = -np.inf  # no distribution
    y = rng.integers(0, 2048, 8)
    y[3] = 4
    return z, zp, y


def test_flagged_rows_are_recomputed_on_the_jax_path():
    z, zp, y = _awkward()
    _, flags = _pallas(z, zp, y, 0.8, programs=None)
    assert list(np.flatnonzero(flags)) == [1, 2, 4, 5, 6]
    got = {k: np.asarray(v) for k, v in measure(z, zp, y, 0.8, impl="pallas").items()}
    rows = [1, 2, 4, 5, 6]
    jax_path = measure(z[rows], zp[rows], y[rows], 0.8, impl="jax")
    for key in COLUMNS:
        np.testing.assert_array_equal(got[key][rows], np.asarray(jax_path[key]), err_msg=key)
    kept = [0, 3, 7]
    with np.errstate(invalid="ignore"):  # the rows left out: NaN and no distribution
        want = _reference(z, zp, y, 0.8)
    _assert_close({k: v[kept] for k, v in got.items()}, {k: v[kept] for k, v in want.items()}, 0.8)
    assert np.isnan(got["log_ratio"][3]) and np.isfinite(got["tv"][3])


def test_with_and_without_jit():
    """Inside a caller's jit the flagged rows take the JAX path's values through a branch; the
    eager call routes them on the host: the same columns (the JAX path's rows in blocks of
    another size: its one-sided rows agree to its documented 1e-6 absolute)."""
    z, zp, y = _awkward()
    eager = {k: np.asarray(v) for k, v in measure(z, zp, y, 0.8, impl="pallas").items()}
    jitted = jax.jit(lambda a, b, t: measure(a, b, t, 0.8, impl="pallas"))(z, zp, y)
    for key in COLUMNS:
        np.testing.assert_allclose(
            np.asarray(jitted[key]), eager[key], rtol=1e-4, atol=2e-6, err_msg=key
        )
    keep = np.delete(np.arange(8), [1, 2, 4, 5, 6])
    clean = jax.jit(lambda a, b, t: measure(a, b, t, 0.8, impl="pallas"))
    out = clean(z[keep], zp[keep], y[keep])
    for key in COLUMNS:
        np.testing.assert_allclose(
            np.asarray(out[key]), eager[key][keep], rtol=1e-6, atol=1e-12, err_msg=key
        )


def test_auto_takes_the_kernel_on_one_gpu(monkeypatch):
    """``impl="auto"`` with one GPU device runs the kernel (here interpreted)."""
    import kernel_contracts.kernels.measurement.measure_pallas as kernel

    calls = []
    real = kernel.measure_rows

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, "measure_rows", counted)
    rng = np.random.default_rng(1)
    z = (rng.normal(size=(4, 256)) * 2).astype(np.float32)
    zp = (z + rng.normal(size=z.shape) * 0.01).astype(np.float32)
    y = rng.integers(0, 256, 4)
    gpu = types.SimpleNamespace(platform="gpu")
    out = measure(z, zp, y, devices=[gpu])
    assert len(calls) == 1 and calls[0]["interpret"] is (jax.default_backend() != "gpu")
    _assert_close({k: np.asarray(v) for k, v in out.items()}, _reference(z, zp, y, 1.0), 1.0)
    measure(z, zp, y, impl="cpu")
    assert len(calls) == 1


def test_program_has_no_erasable_casts():
    z = jnp.zeros((8, 2048), jnp.float32)
    text = (
        jax.jit(lambda a, b, t: measure_rows(a, b, t, np.float32(1.0), interpret=True, **OPTIONS))
        .lower(z, z, jnp.zeros(8, jnp.int32))
        .as_text()
    )
    assert erasable_casts(text) == ()


def test_decisions_equal_the_portable_path_bit_for_bit():
    """Which token each kernel ranks first and the margin to the runner-up, on rows with ties
    within and across chunks, signed zeros, logits masked by both kernels and a large common
    drift: the same bits as ``impl="portable"`` (binary64, the same on every machine)."""
    rng = np.random.default_rng(12)
    z = rng.integers(-4, 5, size=(16, 4096)).astype(np.float32) * 0.5  # many ties
    zp = (z + rng.integers(-1, 2, size=z.shape) * 0.25).astype(np.float32)
    z[0, [7, 3000]] = zp[0, [3000, 7]] = 9.0  # ties across chunks on both sides: no flip
    z[1, [1024, 1025]] = 9.0  # a tie at a chunk's start
    z[2] = 0.0
    z[2, 9] = -0.0  # signed zeros tie
    z[3, :2048] = zp[3, :2048] = -np.inf  # masked by both in whole chunks
    zp[4, 4095] = 30.0  # z' alone ranks the last logit first
    z[5] = rng.normal(size=4096).astype(np.float32)
    zp[5] = z[5] + np.float32(0.75) + (rng.normal(size=4096) * 1e-6).astype(np.float32)
    y = rng.integers(0, 4096, 16)
    got, _ = _pallas(z, zp, y, 0.8)
    want = {k: np.asarray(v) for k, v in measure(z, zp, y, 0.8, impl="portable").items()}
    for key in ("top1_flip", "margin"):
        np.testing.assert_array_equal(got[key].view(np.int32), want[key].view(np.int32), key)
    assert got["top1_flip"][0] == 0.0 and got["top1_flip"][4] == 1.0
