"""Correction weights at the edges of the probability range: every estimator where the training
policy is certain (π(y) = 1), the inference policy is certain (π'(y) = 1), or both, with each
sign of the advantage, against the estimator's documented rule evaluated in exact arithmetic;
and DPPO's binary KL over a grid of extreme probabilities (1, rounding to 1, subnormal, 0)
against a high-precision evaluation with the convention 0·log 0 = 0."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from kernel_contracts.kernels.rl import ESTIMATOR_NAMES, TIE_RULES, correction_weights

# (π(y), π'(y)) of one real token a row; each row is followed by one padding position
EDGES = {"pi=1": (1.0, 0.5), "pi'=1": (0.5, 1.0), "both=1": (1.0, 1.0)}
ADVANTAGES = (1.0, -1.0)

PARAMS = {
    "plain": {},
    "tis": {"cap": 1.5},
    "mis": {"cap": 1.5},
    "ppo_clip": {"clip_epsilon": 0.2},
    "icepop": {"band": (0.6, 1.5)},
    "seq_is": {},
    "seq_tis": {"cap": 1.5},
    "geo_mask": {"band": (0.6, 1.5)},
    "tv_mask": {"threshold": 0.3},
    "kl_mask": {"threshold": 0.3},
    "dppo_tv": {"threshold": 0.3},
    "dppo_kl": {"threshold": 0.3},
    "dual_clip": {"clip_epsilon": 0.2, "cap": 1.5},
    "seq_mask": {"band": (0.6, 1.5)},
    "seq_outlier": {"band": (0.6, 1.5)},
    "tis_mask": {"cap": 1.2, "band": (0.4, 3.0)},
    "opsm": {"threshold": 0.1},
    "kl_reject": {"reject": "token_k1,token_k3", "reject_threshold": "0.4_3.0,0.25"},
    "tis_clip": {"band": (0.6, 1.5)},
    "tis_norm": {"cap": 1.5},
    "gspo": {"clip_epsilon": 0.2},
    "cispo": {"band": (0.6, 1.5)},
    "sapo": {"temperatures": (1.0, 1.05)},
    "vespo": {"gamma": (2.0, 3.0, 3.0, 2.0)},
    # every token picked (ρ = 1, a band holding every covariance): per-token rules
    "clip_cov": {"clip_epsilon": 0.2, "cov_fraction": 1.0, "cov_band": (-1e9, 1e9)},
    "kl_cov": {"cov_fraction": 1.0, "kl_coef": 0.5},
}


def _bkl(q: mpmath.mpf, p: mpmath.mpf) -> mpmath.mpf:
    """Binary KL(q ‖ p) with 0·log(0/x) = 0 and a·log(a/0) = +inf (a > 0)."""

    def term(a, b):
        if a == 0:
            return mpmath.mpf(0)
        return mpmath.inf if b == 0 else a * mpmath.log(a / b)

    return term(q, p) + term(1 - q, 1 - p)


def _rule(name: str, p: float, q: float, a: float) -> mpmath.mpf:
    """The documented ω of one token sequence (W = w, n = 1) in exact arithmetic."""
    prm = PARAMS[name]
    p, q = mpmath.mpf(p), mpmath.mpf(q)
    w = p / q
    lo, hi = prm.get("band", (0, 0))
    inside = lo <= w <= hi
    tv = abs(p - q)  # one of the two laws is a point mass: TV is |π(y) − π'(y)|
    kl = mpmath.log(q / p) if q == 1 else (mpmath.inf if p == 1 and q < 1 else mpmath.mpf(0))
    if name == "plain":
        return mpmath.mpf(1)
    if name in ("tis", "seq_tis"):
        return min(w, prm["cap"])
    if name == "mis":
        return w if w <= prm["cap"] else 0
    if name in ("ppo_clip", "dual_clip", "gspo"):  # one token: GSPO's s is w
        e = prm["clip_epsilon"]
        clipped = (a > 0 and w > 1 + e) or (a < 0 and w < 1 - e)
        clipped |= name == "dual_clip" and a < 0 and w > prm["cap"]
        return 0 if clipped else w
    if name in ("icepop", "geo_mask", "seq_mask", "seq_outlier"):
        return w if inside else 0
    if name == "seq_is":
        return w
    if name == "tv_mask":
        return 0 if tv > prm["threshold"] else w
    if name == "kl_mask":
        return 0 if kl > prm["threshold"] else w
    if name == "dppo_tv":
        tau = prm["threshold"]
        return 0 if (a > 0 and p - q > tau) or (a < 0 and q - p > tau) else w
    if name == "dppo_kl":
        far = _bkl(q, p) > prm["threshold"]
        return 0 if far and ((a > 0 and p > q) or (a < 0 and p < q)) else w
    if name == "tis_mask":
        return min(w, prm["cap"]) if inside else 0
    if name == "opsm":
        return 0 if a < 0 and -mpmath.log(w) > prm["threshold"] else w
    if name in ("tis_clip", "cispo"):
        return min(max(w, lo), hi)
    if name == "tis_norm":  # before the division by the batch mean (the test divides)
        return min(w, prm["cap"])
    if name == "sapo":  # w·sech²(τ(w − 1)/2), τ_pos for A > 0 and τ_neg for A ≤ 0
        tau = prm["temperatures"][0 if a > 0 else 1]
        return w * mpmath.sech(tau * (w - 1) / 2) ** 2
    if name == "vespo":  # one token: W = w, (k, λ) the pos pair for A ≥ 0
        k, lam = prm["gamma"][:2] if a >= 0 else prm["gamma"][2:]
        return mpmath.e**lam * w**k * mpmath.e ** (-lam * w)
    if name == "clip_cov":  # PPO clips a token or the covariance drops it: 0 either way
        return mpmath.mpf(0)
    if name == "kl_cov":  # κ·|log w|'s gradient κ·sign(log w), over A
        return w - prm["kl_coef"] * mpmath.sign(mpmath.log(w)) / a
    if name == "kl_reject":  # k1 = −log w in [log 0.4, log 3]; k3 = w − 1 − log w ≤ 0.25
        k1, k3 = -mpmath.log(w), w - 1 - mpmath.log(w)
        keep = mpmath.log(0.4) <= k1 <= mpmath.log(3.0) and k3 <= 0.25
        return w if keep else 0
    raise AssertionError(name)


def _cases():
    rows = [(tag, p, q, a) for tag, (p, q) in EDGES.items() for a in ADVANTAGES]
    logp = np.array([[math.log(p), 0.0] for _, p, _, _ in rows], np.float32)
    logq = np.array([[math.log(q), 0.0] for _, _, q, _ in rows], np.float32)
    mask = np.array([[1.0, 0.0]] * len(rows), np.float32)
    adv = np.array([[a, a] for *_, a in rows], np.float32)
    tv = np.array([[abs(p - q), 0.0] for _, p, q, _ in rows], np.float32)
    # KL(π'‖π): +inf where π is certain and π' is not, −log π(y) where π' is certain
    kl_of = {(1.0, 0.5): math.inf, (0.5, 1.0): math.log(2.0), (1.0, 1.0): 0.0}
    kl = np.array([[kl_of[p, q], 0.0] for _, p, q, _ in rows], np.float32)
    return rows, logp, logq, mask, adv, tv, kl


ROWS, LOGP, LOGQ, MASK, ADV, TV, KL = _cases()


@pytest.mark.parametrize(
    ("name", "ties"),
    [(n, None) for n in ESTIMATOR_NAMES]
    + [(n, f) for f, rules in TIE_RULES.items() for n in rules],
)
def test_every_estimator_at_certain_policies_follows_its_rule(name, ties):
    """Ours and every framework's rule: no threshold lies on these ratios, so all agree."""
    extra = {"token_tv": TV, "token_kl": KL, "logp_inf": LOGQ, "ties": ties}
    omega = np.asarray(
        correction_weights(name, LOGP - LOGQ, MASK, ADV, params=PARAMS[name], **extra)
    )
    assert not np.isnan(omega).any(), omega
    assert np.all(omega[:, 1] == 0.0)  # padding
    wants = [float(_rule(name, p, q, a)) for _, p, q, a in ROWS]
    if name == "tis_norm":  # the batch's mean of min(w, c) divides every weight
        wants = [x / (sum(wants) / len(wants)) for x in wants]
    for i, (tag, *_, a) in enumerate(ROWS):
        want = wants[i]
        where = f"{name} at {tag}, A = {a}"
        if want == 0:
            assert omega[i, 0] == 0.0, where
        else:
            assert omega[i, 0] == pytest.approx(want, rel=1e-6), where


def test_the_edge_rules_bite():
    """The parameters make every rule drop or change some edge token, and keep some."""
    for name in ESTIMATOR_NAMES:
        values = {float(_rule(name, p, q, a)) for _, p, q, a in ROWS}
        ratios = {float(mpmath.mpf(p) / q) for _, p, q, _ in ROWS}
        if name not in ("plain", "seq_is"):
            assert values != ratios, name


def test_dppo_kl_drops_a_certain_inference_token_the_training_policy_lowers():
    # π'(y) = 1, π(y) = 1/2, A < 0: binary KL = −log π(y) = log 2 > τ, and π moves with A
    omega = correction_weights(
        "dppo_kl", np.log([[0.5]]), np.ones((1, 1)), -np.ones((1, 1)),
        params={"threshold": 0.3}, logp_inf=np.zeros((1, 1)),
    )  # fmt: skip
    assert float(omega[0, 0]) == 0.0
    # below the threshold the token is kept: log(1/0.9) ≈ 0.105 < 0.3
    omega = correction_weights(
        "dppo_kl", np.log([[0.9]]), np.ones((1, 1)), -np.ones((1, 1)),
        params={"threshold": 0.3}, logp_inf=np.zeros((1, 1)),
    )  # fmt: skip
    assert float(omega[0, 0]) == pytest.approx(0.9, rel=1e-6)


# log π'(y): certain, rounding to 1 in float32, ordinary, tiny, subnormal, underflowing to 0,
# and 0 (no NaN weight; π(y) is then undetermined by the inputs, so no rule is checked)
LOG_Q = [0.0, -1e-30, -1e-8, -0.7, -20.0, -50.0, -103.0, -200.0, -math.inf]
LOG_P = [0.0, -1e-30, -1e-8, -0.05, -0.7, -3.0, -50.0, -103.0, -math.inf]


@pytest.mark.parametrize("tau", [1e-6, 0.01, 0.5, 10.0])
def test_dppo_kl_on_extreme_probabilities_is_never_nan_and_follows_its_rule(tau):
    lq = np.array([[x for x in LOG_Q for _ in LOG_P]], np.float32)
    lp = np.array([[y for _ in LOG_Q for y in LOG_P]], np.float32)
    with np.errstate(invalid="ignore"):  # −inf − (−inf): π and π' both 0, log w taken as 0
        lr = (lp.astype(np.float64) - lq).astype(np.float32)
    lr[np.isnan(lr)] = 0.0
    checked = 0
    for a in (1.0, -1.0):
        adv = np.full(lq.shape, a, np.float32)
        omega = np.asarray(
            correction_weights(
                "dppo_kl", lr, np.ones(lq.shape), adv, params={"threshold": tau}, logp_inf=lq
            )
        )
        assert not np.isnan(omega).any()
        for j in range(lq.shape[1]):
            if lq[0, j] == -np.inf:
                continue
            # the exact rule on the numbers given: q = e^{lq}, p = e^{min(lq + lr, 0)}
            mq = mpmath.mpf(float(lq[0, j]))
            mp = min(mq + mpmath.mpf(float(lr[0, j])), 0)
            q, p = mpmath.exp(mq), mpmath.exp(mp)
            kl = _bkl(q, p)
            # float32 decides p ≶ q and KL ≶ τ; skip the near-ties only rounding can decide
            if abs(p - q) <= 1e-6 * q or (kl != mpmath.inf and abs(kl - tau) <= 1e-3 * tau):
                continue
            moves = (a > 0 and p > q) or (a < 0 and p < q)
            dropped = bool(kl > tau and moves)
            w = min(math.exp(min(float(lr[0, j]), 700.0)), float(np.finfo(np.float32).max))
            where = (float(mq), float(mp), tau, a, kl)
            if dropped:
                assert omega[0, j] == 0.0, where
            else:  # kept: ω = w (a w that float32 flushes to 0 tells nothing)
                assert float(omega[0, j]) == pytest.approx(w, rel=1e-5, abs=1e-37), where
            checked += w > 1e-30
    assert checked > 60
