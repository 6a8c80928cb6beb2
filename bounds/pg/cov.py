"""The covariance losses anchored on the rollout: Clip-Cov (``clip_cov``) and KL-Cov (``kl_cov``).

Setting as in ``bounds.pg.closed_forms``: w = π/π', the bias is ‖E_π'[(ω − w)·A·g]‖ at one
position, g = ∇log π(y) with ‖g‖ ≤ G and |A| ≤ A. Both losses pick tokens by the batch's
covariance cov_t = (A_t − mean A)(log π_t − mean log π) (``kernels.rl.cov``), so a token's
weight depends on the rest of the batch. The bounds hold for every batch, of any size and
make-up, and for every token the rule can pick (Clip-Cov draws at random; the draw is taken as
adversarial, so no draw breaks the bound).

- Clip-Cov: ω = w·1[PPO keeps the token and it is not drawn] ∈ {0, w} (w/2 at a tie of PPO's
  max under PyTorch's autograd), so D = E_π'|ω − w| ≤ E_π' w = 1 and bias ≤ G·A. The
  supremum, attained at every premise value, at π = π' included: a batch whose other tokens
  set the covariance's means places every token of the position inside (lb, ub) (``batch`` in
  the witness: one other token with A and log π chosen for the band), and the draw may take
  it. Clip-Cov's drop is no correction of the kernel mismatch: at π = π' it costs the same.
  Over a large batch at most max(⌊ρ·n⌋, 1) tokens are drawn, a budget a per-position bound
  cannot use (it needs the batch's size).
- KL-Cov: the surrogate −A·r has the weight w exactly (no bias); the penalty κ·|log r| on a
  picked token adds κ·sign(log w)·g to the gradient, whatever A (ω = w − κ·sign(log w)/A where
  A ≠ 0), so bias = κ·‖E_π'[sign(log w)·1[picked]·g]‖ ≤ G·κ·π'(log w ≠ 0) ≤ G·κ. The supremum
  wherever the premise lets some w differ from 1: a batch of one token picks it (k = 1), and a
  tilt with 1 < m < e^s gives every token w ≠ 1. At a premise value 0 (π = π') the bias is 0:
  the route is then not attained.

References:
    Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
    Models" (2025), arXiv:2505.22617 — Clip-Cov and KL-Cov.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from kernel_contracts.bounds import measure
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.pg.witnesses import raised_pair

__all__ = ["COV_LEMMAS", "band_batch", "cov_of"]

Vector = Float[np.ndarray, "vocab"]
G, A, kl_coef = SYMBOLS["G"], SYMBOLS["A"], SYMBOLS["kl_coef"]


def cov_of(logp: Float[np.ndarray, " n"], adv: Float[np.ndarray, " n"]) -> np.ndarray:
    """cov_t = (A_t − mean A)(log π_t − mean log π) of one batch's real tokens, in float64."""
    logp, adv = np.asarray(logp, np.float64), np.asarray(adv, np.float64)
    return (adv - adv.mean()) * (logp - logp.mean())


def band_batch(
    logp: Vector, lb: float, ub: float, a_max: float = 1.0
) -> tuple[float, float, float]:
    """(A_y, A_o, log π_o): a second token o that puts the covariance of every token y of a
    position (log π(y) = ``logp``) strictly inside (lb, ub) in the two-token batch {y, o}.

    With d_y = log π(y) − log π_o ≥ C and A_y − A_o = ±η, cov_y = ±η·d_y/4: the middle m of
    the band sets the sign and η = 4|m|/(C + spread/2); C large makes the spread of cov_y over
    y as small as wanted. |A_o| ≤ a_max."""
    m = 0.5 * (lb + ub)
    lo_p, hi_p = float(np.min(logp)), float(np.max(logp))
    spread = hi_p - lo_p
    sign = 1.0 if m >= 0 else -1.0
    a_y = sign * a_max
    if m == 0:
        return a_y, a_y, lo_p - 1.0  # cov = 0 for every y
    width = ub - lb
    big_c = 4.0 * max(1.0, spread) * max(1.0, abs(m) / width) + 1.0
    eta = 4.0 * abs(m) / (big_c + spread / 2)
    if eta > a_max:  # keep |A_o| ≤ a_max: a longer lever instead of a larger η
        big_c *= eta / a_max
        eta = 4.0 * abs(m) / (big_c + spread / 2)
    return a_y, a_y - sign * eta, lo_p - big_c


def _clip_cov_drops(logp: Vector, lb: float, ub: float) -> bool:
    """Whether ``band_batch`` puts every token's covariance inside the open band (float64)."""
    a_y, a_o, lp_o = band_batch(logp, lb, ub)
    covs = [cov_of(np.array([lp, lp_o]), np.array([a_y, a_o]))[0] for lp in logp]
    return all(lb < c < ub for c in covs)


def _w_clip_cov(osc: float, T: float, lb: float = 1.0, ub: float = 5.0) -> Witness:
    """A tilt of range s and, for each token y, the batch {y, o} of ``band_batch``: y is a
    candidate (or PPO already drops it), and the draw takes y, so ω = 0 and E_π'|ω − w| = 1.
    verl's defaults (lb, ub) = (1, 5) unless given."""
    s = osc / T
    z, zp = raised_pair(0.5, s, T)
    logp, logq = measure.log_softmax(z, T), measure.log_softmax(zp, T)
    if not _clip_cov_drops(logp, lb, ub):
        raise ValueError(f"no two-token batch puts the covariances inside ({lb}, {ub})")
    a_y, a_o, lp_o = band_batch(logp, lb, ub)
    achieved = float(np.sum(np.exp(logp)))  # E_π' w over tokens whose ω is 0
    # the other token: the lowest w the premise allows (ties by position keep y first)
    instance = {"z": z, "z_prime": zp, "batch": {"adv": (a_y, a_o), "logp_other": lp_o,
                "log_ratio_other": -s, "logp": logp, "logq": logq}}  # fmt: skip
    return Witness("pg_bias_clip_cov", {"osc": osc, "T": T}, achieved, 1.0, instance)


def _w_kl_cov(osc: float, T: float, kl_coef: float) -> Witness:
    """A tilt of range s with π'-mass ½ on the raised token (m strictly between 1 and e^s, so
    no token has w = 1), each token alone in its batch (picked): κ·π'(log w ≠ 0) = κ."""
    s = osc / T
    z, zp = raised_pair(0.5, s, T)
    lw = measure.log_ratio(z, zp, T)
    q = np.exp(measure.log_softmax(zp, T))
    achieved = kl_coef * float(np.sum(q * (lw != 0)))
    params = {"osc": osc, "T": T, "kl_coef": kl_coef}
    return Witness("pg_bias_kl_cov", params, achieved, kl_coef, {"z": z, "z_prime": zp})


EXPR = {"pg_bias_clip_cov": G * A, "pg_bias_kl_cov": G * kl_coef}

_TOK = "per-token ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A (assumptions of the guarantee)"
_BATCH = ("every batch of any size and make-up; the tokens the rule picks are any it can pick "
          "(Clip-Cov's random draw taken as adversarial)")  # fmt: skip

COV_LEMMAS: tuple[Lemma, ...] = (
    Lemma("pg_bias_clip_cov", ("any premise",),
          "bias ≤ G·A: Clip-Cov can drop any token PPO keeps, whatever the mismatch",
          (_TOK, _BATCH, "ω = w·1[PPO keeps it and it is not drawn], the rollout the old policy"),
          EXPR["pg_bias_clip_cov"], "0 ≤ ω ≤ w, so E_π'|ω − w| ≤ E_π' w = 1",
          "attained at every premise value (π = π' included): a two-token batch puts every "
          "token of the position inside (lb, ub)", _w_clip_cov),
    Lemma("pg_bias_kl_cov", ("any premise",),
          "bias ≤ G·κ: the penalty κ·|log r| on the picked tokens; the surrogate −A·r is exact",
          (_TOK, _BATCH, "ω = w − κ·sign(log w)/A on the picked tokens, the rollout the old "
           "policy"), EXPR["pg_bias_kl_cov"],
          "the penalty's gradient κ·sign(log w)·g has norm ≤ κ·G on every picked token, A = 0 "
          "included", "attained where the premise lets w differ from 1 (a one-token batch is "
          "picked); 0 at π = π'", _w_kl_cov),
)  # fmt: skip
