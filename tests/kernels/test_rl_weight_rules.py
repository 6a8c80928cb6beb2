"""The estimators' rules computed by NumPy (``kernels.rl.numpy_weights``, what a log's weight
diagnostics use, without JAX) against the same rules on ``jax.numpy``
(``kernels.rl.correction_weights``): every estimator, under our tie rules and each
framework's, on log-ratios spread over the thresholds, long sequences and padding."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_contracts.kernels.rl import ESTIMATOR_NAMES, correction_weights, numpy_weights
from kernel_contracts.kernels.rl.ties import FRAMEWORKS, TIE_RULES

PARAMS = {
    "tis": {"cap": 1.2}, "mis": {"cap": 1.2}, "seq_tis": {"cap": 2.0},
    "ppo_clip": {"clip_epsilon": 0.2}, "icepop": {"band": (0.5, 2.0)},
    "geo_mask": {"band": (0.9, 1.1)}, "tv_mask": {"threshold": 0.1},
    "kl_mask": {"threshold": 0.05}, "dppo_tv": {"threshold": 0.05},
    "dppo_kl": {"threshold": 0.02}, "dual_clip": {"clip_epsilon": 0.2, "cap": 3.0},
    "seq_mask": {"band": (0.5, 2.0)}, "seq_outlier": {"band": (0.5, 2.0)},
    "tis_mask": {"cap": 1.5, "band": (0.5, 2.0)}, "opsm": {"threshold": 0.05},
    "kl_reject": {"reject": "token_k1,seq_mean_k3", "reject_threshold": "0.5_2.0,0.01"},
    "tis_clip": {"band": (0.8, 1.25)}, "tis_norm": {"cap": 2.0},
    "gspo": {"clip_epsilon": 0.2}, "cispo": {"band": (0.6, 2.0)},
    "sapo": {"temperatures": (1.0, 1.5)}, "vespo": {"gamma": (2.0, 3.0, 3.0, 2.0)},
    "clip_cov": {"clip_epsilon": 0.2, "cov_fraction": 0.05, "cov_band": (-0.5, 5.0)},
    "kl_cov": {"cov_fraction": 0.05, "kl_coef": 0.5},
}  # fmt: skip
CASES = [
    (name, ties)
    for name in ESTIMATOR_NAMES
    for ties in (None, *FRAMEWORKS)
    if ties is None or name in TIE_RULES[ties]
]


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    shape = (6, 40)
    lr = (rng.normal(0, 0.3, shape) * rng.choice([0.1, 1, 10], shape)).astype(np.float32)
    lr[0, :5] = [40.0, -40.0, 90.0, -90.0, 0.0]  # ratios that overflow float32
    mask = (rng.random(shape) > 0.15).astype(np.float32)
    mask[1] = 0.0  # a sequence of padding only
    adv = rng.choice([-1.0, 1.0], shape).astype(np.float32)
    logp_inf = -rng.exponential(1.0, shape).astype(np.float32)
    tv = rng.random(shape).astype(np.float32) * 0.2
    kl = rng.random(shape).astype(np.float32) * 0.1
    return lr, mask, adv, {"logp_inf": logp_inf, "token_tv": tv, "token_kl": kl}


@pytest.mark.parametrize(("name", "ties"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_numpy_gives_the_jax_weights(name, ties):
    for seed in (0,):
        lr, mask, adv, extra = _inputs(seed)
        params = PARAMS.get(name, {})
        ours = numpy_weights(name, lr, mask, adv, params=params, ties=ties, **extra)
        theirs = np.asarray(correction_weights(name, lr, mask, adv, params=params, ties=ties,
                                               **extra))  # fmt: skip
        assert isinstance(ours, np.ndarray) and ours.dtype == theirs.dtype == np.float32
        # XLA on the CPU flushes float32 subnormals to zero (e^-90 = 8e-40 is 0 there), NumPy
        # keeps them; and it adds a sequence's log-ratios in another order (a few ulps of the
        # sum, times e^sum): equal up to that
        normal = np.where(np.abs(ours) < np.finfo(np.float32).tiny, 0.0, ours)
        np.testing.assert_array_equal(normal == 0, theirs == 0, err_msg=f"{name} {ties}")
        np.testing.assert_allclose(normal, theirs, rtol=2e-5, atol=0, err_msg=f"{name} {ties}")
        assert np.all(ours[mask == 0] == 0) and np.all(np.isfinite(ours))


def test_numpy_refuses_what_jax_refuses():
    lr, mask, adv, _ = _inputs(0)
    for call in (numpy_weights, correction_weights):
        with pytest.raises(ValueError, match="estimator 'tv_mask' needs token_tv"):
            call("tv_mask", lr, mask, adv, params={"threshold": 0.1})
        with pytest.raises(ValueError, match="unknown estimator 'tiss'"):
            call("tiss", lr, mask, adv)
