"""sapo's weight is the gradient of the frameworks' SAPO loss as their code writes it: autodiff
of −A·(4/τ)·σ(τ(r − 1)) with respect to log π, over −A, with r = exp(log π − log π_old) and the
rollout as π_old; verl and SkyRL clamp log r to ±20 first (no gradient beyond), TRL does not."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.kernels.rl import correction_weights


def _framework_weight(lp, lq, adv, tau_pos, tau_neg, clamp: bool):
    def loss(lp_):
        log_r = lp_ - lq
        if clamp:
            log_r = jnp.clip(log_r, -20.0, 20.0)
        tau = jnp.where(adv > 0, tau_pos, tau_neg)
        gate = jax.nn.sigmoid(tau * (jnp.exp(log_r) - 1.0)) * (4.0 / tau)
        return jnp.sum(-gate * adv)

    return -jax.grad(loss)(lp) / adv


@pytest.mark.parametrize(("ties", "clamp"), [(None, False), ("trl", False), ("verl", True),
                                             ("skyrl", True)])  # fmt: skip
def test_sapo_weight_is_the_gradient_of_the_frameworks_gate(ties, clamp):
    rng = np.random.default_rng(3)
    lq = np.log(rng.uniform(0.01, 1.0, (8, 16)))
    lr = rng.normal(0.0, 0.6, (8, 16))
    lr[0, :4] = [25.0, -25.0, 19.5, -19.5]  # past and inside the ±20 clamp
    lp = lq + lr
    adv = rng.choice([-1.5, -0.5, 0.5, 2.0], (8, 16))
    f32 = [jnp.asarray(x, jnp.float32) for x in (lp, lq, adv)]
    want = np.asarray(_framework_weight(*f32, 1.0, 1.05, clamp))
    params = {"temperatures": (1.0, 1.05)}
    got = np.asarray(
        correction_weights("sapo", lr, np.ones_like(lr), adv, params=params, ties=ties)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-12)
    assert (got[0, 1] == 0.0) == clamp  # log w = −25: 0 under the clamp, ≈ e^−25 without
    assert got[0, 0] == 0.0  # log w = 25: the gate is flat either way
