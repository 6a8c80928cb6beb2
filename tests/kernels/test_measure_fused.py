"""The fused measurement pass (kernels.measurement.measure_fused, and its compiled host twin
kernels.measurement.measure_cpu) and its log-domain fallback, against a float64 reference (and
40-digit arithmetic where float64 itself cancels), with and without jit: ties, masked (−inf) tokens,
a large common drift, chunked argmax, overlapping row blocks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from kernel_contracts.kernels.measurement._measure import COLUMNS, measure
from kernel_contracts.kernels.measurement.measure_cpu import measure_rows
from kernel_contracts.kernels.measurement.measure_fused import (
    EXTREME_U,
    SERIES_BELOW,
    block_metrics,
    phi_series,
)
from kernel_contracts.kernels.measurement.measure_portable import EXTREME_U as PORTABLE_EXTREME_U
from kernel_contracts.kernels.measurement.measure_portable import measure_rows as portable_rows


def _log_softmax(x):
    top = np.max(x)
    return x - (top + np.log(np.sum(np.exp(x - top))))


def _reference(z, zp, y, temperature):
    """Every column in float64, one row at a time, with the documented −inf semantics."""
    out = {k: [] for k in COLUMNS}
    for zr, zpr, yr in zip(np.asarray(z, np.float64), np.asarray(zp, np.float64), y, strict=True):
        with np.errstate(invalid="ignore"):
            d = np.where(zr == zpr, 0.0, zpr - zr)
        lp, lq = _log_softmax(zr / temperature), _log_softmax(zpr / temperature)
        p, q = np.exp(lp), np.exp(lq)
        only_p = np.any((zr > -np.inf) & (zpr == -np.inf))
        only_q = np.any((zr == -np.inf) & (zpr > -np.inf))
        with np.errstate(invalid="ignore"):
            kl_pq = np.sum(np.where(p > 0, p * (lp - lq), 0.0))
            kl_qp = np.sum(np.where(q > 0, q * (lq - lp), 0.0))
            log_ratio = lp[yr] - lq[yr]
            entropy = -np.sum(np.where(p > 0, p * lp, 0.0))
        top2 = np.sort(zr)[-2:] if len(zr) > 1 else np.array([-np.inf, zr[0]])
        values = {
            "logit_drift": np.max(np.abs(d)),
            "logit_oscillation": np.max(d) - np.min(d),
            "tv": 0.5 * np.sum(np.abs(p - q)),
            "kl_train_inf": np.inf if only_p else kl_pq,
            "kl_inf_train": np.inf if only_q else kl_qp,
            "log_ratio": log_ratio,
            "top1_flip": float(np.argmax(zr) != np.argmax(zpr)),
            "margin": top2[1] - top2[0],
            "entropy": entropy,
            "token_prob": p[yr],
        }
        for k, v in values.items():
            out[k].append(v)
    return {k: np.array(v) for k, v in out.items()}


def _assert_close(got, want, temperature, rtol=2e-5, atol=1e-7):
    """Relative agreement; log_ratio = log E_π[e^d] − d_y is held to float32 rounding of its
    terms (|d| ≤ osc/T); equal infinities and NaNs agree."""
    osc = np.where(np.isfinite(want["logit_oscillation"]), want["logit_oscillation"], 0.0)
    for key in COLUMNS:
        g, w = np.asarray(got[key], np.float64), want[key]
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        if key == "log_ratio":
            atol = np.maximum(atol, 4e-7 * (1 + osc / temperature))
        with np.errstate(invalid="ignore"):
            ok = same | (np.abs(g - w) <= rtol * np.abs(w) + atol)
        assert ok.all(), (key, g[~ok], w[~ok])


def _pair(rng, rows, vocab, drift, spread=3.0):
    z = (rng.normal(size=(rows, vocab)) * spread).astype(np.float32)
    zp = (z + rng.normal(size=z.shape) * drift).astype(np.float32)
    return z, zp, rng.integers(0, vocab, rows)


_FUSED = jax.jit(block_metrics)


def _fused(z, zp, y, temperature):
    return _FUSED(jnp.asarray(z), jnp.asarray(zp), jnp.asarray(y, jnp.int32), 1.0 / temperature)


def _host(z, zp, y, temperature):
    """The host pass alone, its ``extreme`` the rows it leaves to the JAX path."""
    table, redo = measure_rows(z, zp, y, np.float32(1.0 / temperature))
    return {**{k: table[:, i] for i, k in enumerate(COLUMNS)}, "extreme": redo}


def _portable(z, zp, y, temperature):
    """The portable pass (``impl="portable"``), which needs no fallback: ``extreme`` is empty."""
    table = portable_rows(z, zp, y, temperature)
    columns = {k: table[:, i] for i, k in enumerate(COLUMNS)}
    return {**columns, "extreme": np.zeros(len(y), bool)}


PASSES = pytest.mark.parametrize(
    "fused", [_fused, _host, _portable], ids=["jax", "cpu", "portable"]
)
IMPLS = pytest.mark.parametrize("impl", ["jax", "cpu", "portable"])


def _table(z, zp, y, temperature, impl):
    """``measure`` on 6 rows x 128 logits, in blocks of 4 on the JAX path: the last block starts
    at row 2 and rewrites rows 2 and 3 (one compiled program for every test that uses it)."""
    assert z.shape == (6, 128)
    out = measure(z, zp, y, temperature, block=4, impl=impl)
    return {k: np.asarray(v) for k, v in out.items()}


def test_phi_series_truncation_and_float32_rounding():
    """The series (evaluated in float64: truncation only) is within 1e-9 of e^u − 1 − u on
    |u| < ½; in float32 within a few roundings."""
    u = np.linspace(-SERIES_BELOW, SERIES_BELOW, 2001)
    exact = np.expm1(u) - u
    assert np.all(np.abs(phi_series(u) - exact) <= 1e-9 * exact)
    single = np.asarray(phi_series(jnp.asarray(u, jnp.float32)), np.float64)
    u32 = u.astype(np.float32).astype(np.float64)
    assert np.all(np.abs(single - (np.expm1(u32) - u32)) <= 4e-7 * (np.expm1(u32) - u32))


@pytest.mark.parametrize(("vocab", "drift", "temperature"), [(384, 0.05, 1.0), (300, 0.7, 0.6)])
@PASSES
def test_fused_block_matches_float64(vocab, drift, temperature, fused):
    """Both branches of ψ (|u| below and above ½), several 128-logit chunks (384) and a
    vocabulary that 128 does not divide (300)."""
    rng = np.random.default_rng(vocab)
    z, zp, y = _pair(rng, 6, vocab, drift)
    got = fused(z, zp, y, temperature)
    assert not np.asarray(got.pop("extreme")).any()
    _assert_close(got, _reference(z, zp, y, temperature), temperature)


@PASSES
def test_ties_pick_the_first_index_across_and_within_chunks(fused):
    z = np.zeros((6, 384), np.float32)
    zp = z.copy()
    z[0, [5, 300]] = 4.0  # tie across chunks: index 5 wins; z' breaks it the other way
    zp[0, [5, 300]] = [4.0, 4.5]
    z[1, [130, 131]] = 2.0  # tie inside one chunk; z' keeps the tie: no flip
    zp[1, [130, 131]] = 2.0
    z[2, 383] = 1.0  # last logit of the last chunk; z' ties it earlier: a flip
    zp[2, [0, 383]] = 1.0
    z[3] = np.linspace(-1, 1, 384)  # distinct values: a margin of one step
    zp[3] = z[3]
    y = np.array([5, 131, 0, 10, 0, 0])
    got = {k: np.asarray(v) for k, v in fused(z, zp, y, 1.0).items()}
    np.testing.assert_array_equal(got["top1_flip"], [1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(got["margin"], [0.0, 0.0, 1.0, z[3, -1] - z[3, -2], 0.0, 0.0])
    _assert_close(got, _reference(z, zp, y, 1.0), 1.0)


@IMPLS
def test_masked_tokens(impl):
    """−inf on both sides drops the token; on one side the KL towards that kernel is +inf, and
    the other columns are summed directly (about 1e-6 absolute: rows 1, 2 and 4)."""
    rng = np.random.default_rng(5)
    z, zp, y = _pair(rng, 6, 128, 0.1)
    z[0, 10:20] = zp[0, 10:20] = -np.inf  # masked by both
    zp[1, 7] = -np.inf  # π' lacks a token π has
    z[2, 9] = -np.inf  # π lacks a token π' has
    z[3, 4] = zp[3, 4] = -np.inf  # both mask the observed token: log_ratio is NaN
    zp[4, np.argmax(z[4])] = -np.inf  # K_inf masks the most likely token of K_train
    y[3] = 4
    y[0] = 3
    z[5], zp[5], y[5] = z[0], zp[0], y[0]  # row 0 again, its masked tokens at −1e4 both sides
    z[5, 10:20] = zp[5, 10:20] = -1e4
    got = _table(z, zp, y, 0.8, impl)
    want = _reference(z, zp, y, 0.8)
    exact, direct = [0, 3, 5], [1, 2, 4]
    _assert_close(
        {k: v[exact] for k, v in got.items()}, {k: v[exact] for k, v in want.items()}, 0.8
    )
    _assert_close(
        {k: v[direct] for k, v in got.items()},
        {k: v[direct] for k, v in want.items()},
        0.8,
        rtol=1e-4,
        atol=2e-6,
    )
    assert got["kl_train_inf"][1] == np.inf and np.isfinite(got["kl_inf_train"][1])
    assert got["kl_inf_train"][2] == np.inf and np.isfinite(got["kl_train_inf"][2])
    assert got["logit_drift"][1] == got["logit_drift"][2] == got["logit_drift"][4] == np.inf
    assert got["kl_train_inf"][4] == np.inf and got["top1_flip"][4] == 1
    assert np.isnan(got["log_ratio"][3]) and np.isfinite(got["tv"][3])
    # a token masked by both kernels is a token of probability 0 under both
    for key in COLUMNS:
        np.testing.assert_allclose(got[key][0], got[key][5], rtol=1e-6, atol=1e-12, err_msg=key)


def _exact(z, zp, temperature):
    mp.mp.dps = 40
    a = [mp.mpf(float(v)) / temperature for v in z]
    b = [mp.mpf(float(v)) / temperature for v in zp]
    la = mp.log(mp.fsum(mp.exp(x) for x in a))
    lb = mp.log(mp.fsum(mp.exp(x) for x in b))
    p = [mp.exp(x - la) for x in a]
    q = [mp.exp(x - lb) for x in b]
    lr = [(x - la) - (w - lb) for x, w in zip(a, b, strict=True)]
    return {
        "tv": mp.fsum(abs(u - v) for u, v in zip(p, q, strict=True)) / 2,
        "kl_train_inf": mp.fsum(u * r for u, r in zip(p, lr, strict=True)),
        "kl_inf_train": -mp.fsum(v * r for v, r in zip(q, lr, strict=True)),
    }


@PASSES
def test_large_common_drift_with_tiny_differences_stays_accurate(fused):
    """Δ = 0.75 + noise of 1e-6: the divergences come from the noise alone; the shift by the
    top token's drift is exact, so they keep their relative accuracy (40-digit reference)."""
    rng = np.random.default_rng(9)
    z = (rng.normal(size=(6, 384)) * 2).astype(np.float32)
    zp = (z + 0.75 + rng.normal(size=z.shape) * 1e-6).astype(np.float32)
    got = {k: np.asarray(v, np.float64) for k, v in fused(z, zp, np.zeros(6, int), 0.9).items()}
    for i in range(3):
        for key, value in _exact(z[i], zp[i], 0.9).items():
            assert abs(got[key][i] - float(value)) <= 5e-6 * float(value), (key, i)


@IMPLS
def test_extreme_rows_are_flagged_and_recomputed_in_the_log_domain(impl):
    rng = np.random.default_rng(2)
    z, zp, y = _pair(rng, 6, 128, 0.01)
    zp[1, 3] = z[1, 3] + 40.0  # u far above the fast path's range
    zp[4] = z[4] + 0.5 * rng.normal(size=128) + 35.0 * (np.arange(128) == 9)
    if impl != "portable":  # the portable pass takes its log-domain rows itself
        fused = _fused if impl == "jax" else _host
        flags = np.asarray(fused(z, zp, y, 1.0)["extreme"])
        np.testing.assert_array_equal(flags, [False, True, False, False, True, False])
        assert EXTREME_U < 40.0 - 1.0
    else:  # past its binary64 range: u far above PORTABLE_EXTREME_U
        zp[1, 3] = z[1, 3] + 2.5 * PORTABLE_EXTREME_U
        zp[4, 9] = z[4, 9] + 1.2 * PORTABLE_EXTREME_U
    _assert_close(_table(z, zp, y, 1.0, impl), _reference(z, zp, y, 1.0), 1.0)


@pytest.mark.slow
def test_without_jit_every_path_agrees_with_jit():
    """Eager and compiled runs of the fused pass, the log-domain path (row 1), the one-sided
    −inf path (row 2, summed directly), a token masked by both (row 3) and ties (row 0). The
    shape is that of tests/kernels/test_measure_metrics.py's eager test, so the two share their
    compiled programs and the eager runs' per-operation compilations."""
    rng = np.random.default_rng(8)
    z, zp, y = _pair(rng, 5, 40, 0.3)
    z[0, [3, 30]] = zp[0, [3, 30]] = 9.0
    zp[1, 5] = z[1, 5] + 45.0
    zp[2, 6] = -np.inf
    z[3, 7] = zp[3, 7] = -np.inf
    jitted = {k: np.asarray(v) for k, v in measure(z, zp, y, 0.7, impl="jax").items()}
    with jax.disable_jit():
        eager = {k: np.asarray(v) for k, v in measure(z, zp, y, 0.7, impl="jax").items()}
    for key in COLUMNS:
        np.testing.assert_allclose(eager[key], jitted[key], rtol=1e-5, atol=2e-7, err_msg=key)
    _assert_close(jitted, _reference(z, zp, y, 0.7), 0.7, rtol=1e-4, atol=2e-6)
    assert jitted["top1_flip"][0] == 0 and jitted["margin"][0] == 0
    # the host pass, its rows 1 and 2 recomputed on the JAX path
    assert list(np.flatnonzero(_host(z, zp, y, 0.7)["extreme"])) == [1, 2]
    host = {k: np.asarray(v) for k, v in measure(z, zp, y, 0.7, impl="cpu").items()}
    _assert_close(host, _reference(z, zp, y, 0.7), 0.7, rtol=1e-4, atol=2e-6)
    for key in COLUMNS:
        np.testing.assert_array_equal(host[key][1:3], jitted[key][1:3], err_msg=key)


def test_compiled_pass_exponentials_per_logit_pair(monkeypatch):
    """The benchmark's count of the compiled program's work per pair of logits: one exponential
    (e^{z/T − max}) on the path of blocks whose |u| are all below ½, two or more on the dearest
    branches (e^u where |u| ≥ ½, and the log-domain rows)."""
    if jax.default_backend() != "cpu":
        pytest.skip("the count reads XLA's CPU program (a loop over row blocks)")
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench"
    monkeypatch.syspath_prepend(str(bench))
    from bench_measure import count_ops

    from kernel_contracts.kernels.measurement._measure import _compiled

    tokens, vocab, block = 16, 1024, 8
    z = jnp.zeros((tokens, vocab), jnp.float32)
    lowered = _compiled(tuple(jax.local_devices()), block).lower(
        z, z, jnp.zeros(tokens, jnp.int32), jnp.float32(1.0)
    )
    hlo = lowered.compile().as_text()
    work = count_ops(hlo, tokens, vocab, block)
    assert work["exponentials"] == 1, work
    assert work["elementwise"] > 0 and work["reductions"] >= 4 and work["arrays"] >= 1, work
    dearest = count_ops(hlo, tokens, vocab, block, dearest=True)
    assert dearest["exponentials"] >= 2 and dearest["total"] > work["total"], dearest
