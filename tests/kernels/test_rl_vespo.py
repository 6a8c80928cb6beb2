"""vespo's weight follows TRL's ``get_gamma_weights`` at a batch's first step (trainer ratio 1):
φ(W) on every real token of the row, W the product of the token ratios with each log clamped to
[log 1e−8, 20] and the sum clamped again, (k, λ) by A ≥ 0, λ at least 1e−4, padding adding
nothing, and NaN or inf read as 0; NumPy and JAX agree (``test_rl_weight_rules``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernel_contracts.kernels.rl import correction_weights, numpy_weights

GAMMA = (2.0, 3.0, 3.0, 2.0)


def _phi(log_w: float, k: float, lam: float) -> float:
    lam = max(lam, 1e-4)
    return math.exp(lam + k * log_w - lam * math.exp(log_w))


def _clamp(x: float) -> float:
    return min(max(x, math.log(1e-8)), 20.0)


@pytest.mark.parametrize("weights", [numpy_weights, correction_weights])
def test_the_weight_is_phi_of_the_clamped_sequence_ratio(weights):
    lr = np.array(
        [
            [0.1, -0.3, 0.05, 0.0],  # an ordinary row, the last token padding
            [25.0, -0.5, 0.0, 0.0],  # a token past +20: clamped to 20 before the sum
            [-30.0, 5.0, 0.0, 0.0],  # a token below log 1e−8: clamped up before the sum
            [15.0, 15.0, 0.0, 0.0],  # a sum past 20: clamped again
        ]
    )
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]], float)
    adv = np.array([[1.0] * 4, [-1.0] * 4, [0.0] * 4, [-2.0] * 4])
    got = np.asarray(weights("vespo", lr, mask, adv, params={"gamma": GAMMA}))
    sums = [-0.15, 20.0 - 0.5, math.log(1e-8) + 5.0, 30.0]
    pairs = [GAMMA[:2], GAMMA[2:], GAMMA[:2], GAMMA[2:]]  # A = 0 takes the pos pair
    for b in range(4):
        want = _phi(_clamp(sums[b]), *pairs[b])
        for t in range(4):
            expect = want if mask[b, t] else 0.0
            np.testing.assert_allclose(got[b, t], expect, rtol=2e-5, atol=1e-30)


def test_lambda_is_raised_to_its_floor_and_overflow_reads_zero():
    lr = np.array([[2.0, 0.0]])
    got = numpy_weights("vespo", lr, np.ones_like(lr), np.ones_like(lr),
                        params={"gamma": (1.0, 1e-7, 1.0, 1.0)})  # fmt: skip
    np.testing.assert_allclose(got[0, 0], _phi(2.0, 1.0, 1e-4), rtol=1e-6)
    big = numpy_weights("vespo", lr, np.ones_like(lr), np.ones_like(lr),
                        params={"gamma": (1e6, 1e-3, 1.0, 1.0)})  # fmt: skip
    assert np.all(big == 0.0)  # e^{λ + k·log W − λW} overflows: TRL's nan_to_num gives 0


@pytest.mark.parametrize("gamma", [(0, 3, 3, 2), (2, 3, 3), (2, -1, 3, 2), (2, 3, 3, math.inf)])
def test_bad_gamma_is_refused(gamma):
    with pytest.raises(ValueError, match="gamma"):
        numpy_weights("vespo", np.zeros((1, 2)), np.ones((1, 2)), np.ones((1, 2)),
                      params={"gamma": gamma})  # fmt: skip
