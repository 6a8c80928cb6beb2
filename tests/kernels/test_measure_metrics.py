"""Full-vocabulary per-token metrics on both paths (the XLA program and the host's compiled
pass): against numpy, against high precision, sharded, no retrace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest

from kernel_contracts.kernels.measurement._measure import (
    COLUMNS,
    TRACES,
    measure,
    measure_numpy,
    redo_bucket,
)

ROOT = Path(__file__).resolve().parents[2]
IMPLS = pytest.mark.parametrize("impl", ["jax", "cpu"])


def _pair(rng, tokens, vocab, spread, drift):
    z = (rng.normal(size=(tokens, vocab)) * spread).astype(np.float32)
    zp = (z + rng.normal(size=z.shape) * drift).astype(np.float32)
    y = rng.integers(0, vocab, tokens)
    return z, zp, y


def _as_numpy(out):
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


# absolute error floor of the float64 straightforward reference (log p − log q cancels)
_FLOOR = {"kl_train_inf": 1e-12, "kl_inf_train": 1e-12, "tv": 1e-9, "log_ratio": 1e-9}


def _assert_close(got, want, temperature):
    """Relative agreement; log_ratio = log E_π[e^d] − d_y cancels, so it is held to float32
    rounding of its two terms (|d| ≤ osc/T) rather than of its difference."""
    scale = 1.0 + np.asarray(want["logit_oscillation"]) / temperature
    for key in COLUMNS:
        atol = 4e-7 * scale if key == "log_ratio" else _FLOOR.get(key, 1e-6)
        err = np.abs(got[key] - want[key])
        limit = 2e-5 * np.abs(want[key]) + atol
        assert np.all(err <= limit), (key, np.max(err - limit))


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("drift", [2.0, 0.05, 1e-3])
@IMPLS
def test_matches_numpy_on_random_logits(temperature, drift, impl):
    rng = np.random.default_rng(int(drift * 1e4) + int(temperature * 10))
    z, zp, y = _pair(rng, 64, 512, 3.0, drift)
    got = _as_numpy(measure(z, zp, y, temperature, impl=impl))
    want = measure_numpy(z, zp, y, temperature)
    assert set(got) == set(COLUMNS) == set(want)
    _assert_close(got, want, temperature)


@IMPLS
def test_matches_numpy_on_real_logits(impl):
    """Logits of the trained policy, perturbed the way a bf16 LM head would round them."""
    import jax.numpy as jnp
    import ml_dtypes

    from kernel_contracts.kernels.model.tinylm import load_pretrained, pretrained_extra

    model = load_pretrained("tiny-lm")
    windows = pretrained_extra("tiny-lm")["heldout_windows"][:8].astype(np.int32)
    z = np.asarray(model(jnp.asarray(windows[:, :-1]))).reshape(-1, 256)
    zp = z.astype(ml_dtypes.bfloat16).astype(np.float32)
    y = windows[:, 1:].reshape(-1)
    got = _as_numpy(measure(z, zp, y, 1.0, impl=impl))
    want = measure_numpy(z, zp, y, 1.0)
    _assert_close(got, want, 1.0)
    assert got["entropy"].mean() < 0.5 * np.log(256)  # real logits are peaked
    assert got["logit_drift"].max() > 0


def _exact(z, zp, y, temperature):
    mp.mp.dps = 40
    t = mp.mpf(temperature)
    a = [mp.mpf(float(v)) / t for v in z]
    b = [mp.mpf(float(v)) / t for v in zp]
    la = mp.log(mp.fsum(mp.exp(x) for x in a))
    lb = mp.log(mp.fsum(mp.exp(x) for x in b))
    lp = [x - la for x in a]
    lq = [x - lb for x in b]
    p = [mp.exp(x) for x in lp]
    q = [mp.exp(x) for x in lq]
    return {
        "tv": mp.fsum(abs(u - v) for u, v in zip(p, q, strict=True)) / 2,
        "kl_train_inf": mp.fsum(u * (x - w) for u, x, w in zip(p, lp, lq, strict=True)),
        "kl_inf_train": mp.fsum(v * (w - x) for v, x, w in zip(q, lp, lq, strict=True)),
        "log_ratio": lp[y] - lq[y],
    }


@pytest.mark.parametrize("drift", [1e-7, 1e-4, 3.0])
@IMPLS
def test_relative_accuracy_against_high_precision(drift, impl):
    """float32 divergences stay accurate relative to themselves even when the drift is tiny."""
    rng = np.random.default_rng(7)
    z, zp, y = _pair(rng, 4, 128, 4.0, drift)
    got = _as_numpy(measure(z, zp, y, 0.5, impl=impl))
    for i in range(len(y)):
        exact = _exact(z[i], zp[i], int(y[i]), 0.5)
        for key, value in exact.items():
            if value == 0:
                assert got[key][i] == 0, key
            else:
                # log_ratio = log E_π[e^d] − d_y cancels: float32 rounding of d (|d| ≤ osc/T)
                floor = 2e-7 * got["logit_oscillation"][i] / 0.5 if key == "log_ratio" else 0.0
                err = abs(got[key][i] - float(value))
                assert err <= 5e-6 * abs(float(value)) + floor, (key, i)


@IMPLS
def test_identical_logits_give_zero_divergence(impl):
    rng = np.random.default_rng(1)
    z, _, y = _pair(rng, 16, 256, 5.0, 0.0)
    got = _as_numpy(measure(z, z, y, 0.8, impl=impl))
    for key in ("logit_drift", "logit_oscillation", "tv", "kl_train_inf", "kl_inf_train"):
        assert np.all(got[key] == 0), key
    assert np.all(got["log_ratio"] == 0)
    assert np.all(got["top1_flip"] == 0)


@IMPLS
def test_flip_and_margin_on_hand_made_rows(impl):
    z = np.array([[3.0, 1.0, 0.0, -1.0], [0.0, 0.0, 2.0, 1.5]], np.float32)
    zp = np.array([[3.0, 3.5, 0.0, -1.0], [0.0, 0.0, 2.0, 1.5]], np.float32)
    got = _as_numpy(measure(z, zp, np.array([0, 3]), 1.0, impl=impl))
    np.testing.assert_array_equal(got["top1_flip"], [1.0, 0.0])
    np.testing.assert_allclose(got["margin"], [2.0, 0.5])
    np.testing.assert_allclose(got["logit_drift"], [2.5, 0.0])
    np.testing.assert_allclose(got["logit_oscillation"], [2.5, 0.0])


def test_no_retrace_across_calls_and_temperatures():
    rng = np.random.default_rng(3)
    z, zp, y = _pair(rng, 24, 128, 2.0, 0.1)
    measure(z, zp, y, 1.0, impl="jax")
    before = TRACES["measure"]
    for t in (0.5, 1.0, 2.0):
        z, zp, y = _pair(rng, 24, 128, 2.0, 0.1)
        measure(z, zp, y, t, impl="jax")
        measure(z, zp, y, t)  # the host path (the default here) traces nothing
    assert TRACES["measure"] == before


def _top_k_masked(rng, tokens, vocab, k):
    """Logit pairs whose inference side keeps only its top ``k`` logits in about half the rows
    (−inf elsewhere): the rows the host pass leaves to the XLA program."""
    z, zp, _ = _pair(rng, tokens, vocab, 2.0, 0.1)
    kth = np.sort(zp, axis=1)[:, -k][:, None]
    keep = (zp >= kth) | (rng.random(tokens) < 0.5)[:, None]
    zp = np.where(keep, zp, -np.inf).astype(np.float32)
    return z, zp, np.argmax(zp, axis=1)


@IMPLS
def test_a_row_does_not_depend_on_the_rows_measured_with_it(impl):
    """Bit for bit, a row's columns are the same measured alone, in any run of rows and in
    the whole batch, on both paths, for rows the host pass leaves to the XLA program too (the
    XLA program computed blocks of fewer rows with other bits before it padded them)."""
    z, zp, y = _top_k_masked(np.random.default_rng(5), 13, 640, 50)
    full = {k: np.asarray(v) for k, v in measure(z, zp, y, 0.7, impl=impl).items()}
    for count in (1, 3, 8, 13):
        for start in (0, 13 - count):
            cut = slice(start, start + count)
            part = measure(z[cut], zp[cut], y[cut], 0.7, impl=impl)
            for k in COLUMNS:
                np.testing.assert_array_equal(np.asarray(part[k]), full[k][cut], err_msg=k)


def test_flagged_rows_compile_per_bucket_not_per_count():
    """The host pass leaves 9 to 16 rows to the XLA program in turn: one program (16 rows)."""
    rng = np.random.default_rng(6)

    def measured(flagged):
        z, zp, y = _pair(rng, 40, 256, 2.0, 0.1)
        zp[:flagged, 0] = -np.inf  # one side masks a token: the host pass flags the row
        return measure(z, zp, y, 1.0, impl="cpu")

    measured(16)
    before = TRACES["measure"]
    for flagged in range(9, 17):
        assert np.all(np.asarray(measured(flagged)["kl_train_inf"])[:flagged] == np.inf)
    assert TRACES["measure"] == before


def test_redo_buckets_are_few_and_waste_little():
    counts = np.arange(1, 70_000)
    buckets = np.array([redo_bucket(int(n)) for n in counts])
    assert np.all(buckets >= counts) and np.all(np.diff(buckets) >= 0)
    small = counts <= 1024
    assert np.all(buckets[small] <= np.maximum(8, 2 * counts[small] - 1))
    assert np.all(buckets[~small] <= counts[~small] * 9 / 8)
    assert len(set(buckets[small])) == 8  # 8, 16, ..., 1024
    assert len(set(buckets)) <= 8 + 8 * 7  # an eighth of an octave above 1024 rows


@pytest.mark.no_shape_checks
@IMPLS
def test_bad_shapes_and_temperature_are_rejected(impl):
    z = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="expected z_train and z_inf"):
        measure(z, np.zeros((4, 9), np.float32), np.zeros(4, int), impl=impl)
    with pytest.raises(ValueError, match="expected z_train and z_inf"):
        measure(z, z, np.zeros(5, int), impl=impl)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature must be positive and finite"):
            measure(z, z, np.zeros(4, int), bad, impl=impl)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 8\), got \[0, 8\]"):
        measure(z, z, np.array([0, 1, 2, 8]), impl=impl)
    with pytest.raises(ValueError, match=r"got \[-1, 2\]"):
        measure(z, z, np.array([0, -1, 2, 2]), impl=impl)
    nothing = np.zeros((0, 8), np.float32)
    empty = measure(nothing, nothing, np.zeros(0, int), impl=impl)
    assert set(empty) == set(COLUMNS) and all(v.shape == (0,) for v in empty.values())
    with pytest.raises(ValueError, match="impl must be one of"):
        measure(z, z, np.zeros(4, int), impl="gpu")


_SHARDED = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from kernel_contracts.kernels.measurement._measure import measure
    rng = np.random.default_rng(0)
    z = rng.normal(size=(37, 300)).astype(np.float32) * 3   # 37: not a multiple of 4
    zp = (z + rng.normal(size=z.shape) * 0.05).astype(np.float32)
    y = rng.integers(0, 300, 37)
    many = measure(z, zp, y, 0.9)  # several devices: the JAX path, sharded
    one = measure(z, zp, y, 0.9, devices=jax.local_devices()[:1], impl="jax")
    same = all(np.array_equal(np.asarray(many[k]), np.asarray(one[k])) for k in many)
    close = all(np.allclose(np.asarray(many[k]), np.asarray(one[k]), rtol=1e-6, atol=1e-12)
                for k in many)
    full = measure(z[:36], zp[:36], y[:36], 0.9)
    shards = len(full["tv"].sharding.device_set)
    print(json.dumps({"devices": jax.local_device_count(), "same": same, "close": close,
                      "shards": shards, "rows": int(many["tv"].shape[0])}))
    """
)


def test_sharded_over_four_host_devices_matches_one_device():
    env = dict(os.environ)
    # read when JAX starts: a new process. Both runs compile under the same flags; the cheaper
    # backend passes only shorten compilation (about 40 % of the child's CPU time; a
    # default-flag run gives the same bits)
    env["XLA_FLAGS"] = (
        "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0 "
        "--xla_llvm_disable_expensive_passes=true"
    )
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", _SHARDED],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4
    assert result["shards"] == 4
    assert result["rows"] == 37
    assert result["close"], result


def test_same_results_with_and_without_jit():
    import jax

    rng = np.random.default_rng(11)
    z, zp, y = _pair(rng, 5, 40, 3.0, 0.2)
    zp[2] = z[2] + 45.0 * (np.arange(40) == 7)  # one row on the log-domain path
    jitted = _as_numpy(measure(z, zp, y, 0.7, impl="jax"))
    with jax.disable_jit():
        eager = _as_numpy(measure(z, zp, y, 0.7, impl="jax"))
    for key in COLUMNS:
        np.testing.assert_allclose(eager[key], jitted[key], rtol=1e-5, atol=1e-12, err_msg=key)
    _assert_close(jitted, measure_numpy(z, zp, y, 0.7), 0.7)
