"""The truncated-support shift: log-probs renormalised over the kept sampling support.

With top-p < 1 or top-k > 0, an inference engine that reports *processed* log-probs gives
ℓ'_proc(y) = log π'(y) − log S, S ≤ 1 the probability mass the truncation kept. Against a
training kernel's full-vocabulary ℓ(y), every sampled token then shows u = ℓ'_proc − ℓ =
−log S + (kernel gap): a per-token offset −log S ≥ 0 that is not the kernel's doing. DESIGN §5:
detect it and report it separately, never fold it into the kernel gap.

``support_shift`` describes the offset. Detection (``shift_detected``) is a heuristic (a sign
test on u plus a concentration check); a detected shift under a contract that declares
full-vocabulary log-probs keeps the log-ratio verdicts inconclusive. When the contract declares
processed log-probs under truncated sampling (``shift_declared``) and the log carries log S for
every token (``log_kept_mass``), the shift is undone exactly (``shift_corrected``).

References:
    Holtzman et al., "The Curious Case of Neural Text Degeneration" (ICLR 2020): top-p
    sampling renormalises over the nucleus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

__all__ = [
    "SupportShift",
    "shift_corrected",
    "shift_declared",
    "shift_detected",
    "support_shift",
]

# detected when the sign test's z exceeds this and at least this share of tokens has u > 0
_Z_MIN = 5.0
_POSITIVE_SHARE = 0.75


def shift_detected(sign_test_z: float, positive_share: float, median_shift: float) -> bool:
    """The detection rule: the sign test's z above 5, at least 3/4 of the tokens with u > 0,
    and a positive median u."""
    return sign_test_z > _Z_MIN and positive_share >= _POSITIVE_SHARE and median_shift > 0


def shift_declared(policy) -> bool:
    """Whether a contract's ``policy`` declares the shift: processed log-probs under truncated
    sampling (top-p < 1 or top-k > 0)."""
    return policy.logprobs == "processed" and policy.truncated


def shift_corrected(declared: bool, tokens: int, kept_mass_logged: int) -> bool:
    """Whether a declared shift is undone: the log gives log S for every one of its tokens."""
    return declared and tokens > 0 and kept_mass_logged == tokens


@dataclass(frozen=True)
class SupportShift:
    """What the log says about a truncated-support offset u = ℓ'(rollout) − ℓ(train)."""

    tokens: int
    detected: bool
    positive_share: float  # fraction of tokens with u > 0
    sign_test_z: float  # (k − n/2)/√(n/4) over the n tokens with u ≠ 0
    sign_test_p: float  # one-sided normal approximation of P(Binom(n, ½) ≥ k)
    median_shift: float  # median u: the typical −log S when detected
    quantiles: tuple[tuple[float, float], ...]  # (q, quantile of u)
    zero_rollout_logprob: int  # tokens whose rollout log-prob is exactly 0 (a one-token support)
    kept_mass_logged: int  # tokens whose log carries log S
    mean_log_kept_mass: float | None  # mean logged log S (≤ 0)

    def as_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "detected": self.detected,
            "positive_share": self.positive_share,
            "sign_test_z": self.sign_test_z,
            "sign_test_p": self.sign_test_p,
            "median_shift": self.median_shift,
            "estimated_log_kept_mass": -self.median_shift if self.detected else None,
            "quantiles": {f"q{q:g}": v for q, v in self.quantiles},
            "zero_rollout_logprob_tokens": self.zero_rollout_logprob,
            "kept_mass_logged_tokens": self.kept_mass_logged,
            "mean_log_kept_mass": self.mean_log_kept_mass,
        }


def support_shift(
    train_logprob: Float[np.ndarray, " tokens"],
    rollout_logprob: Float[np.ndarray, " tokens"],
    log_kept_mass: Float[np.ndarray, " tokens"] | None = None,
) -> SupportShift:
    """Describe the offset u = rollout − train over the tokens of a log."""
    lt = np.asarray(train_logprob, dtype=np.float64)
    lr = np.asarray(rollout_logprob, dtype=np.float64)
    u = lr - lt
    n = int(u.shape[0])
    logged = 0
    mean_kept = None
    if log_kept_mass is not None:
        kept = np.asarray(log_kept_mass, dtype=np.float64)
        ok = np.isfinite(kept)
        logged = int(ok.sum())
        mean_kept = float(kept[ok].mean()) if logged else None
    if n == 0:
        return SupportShift(0, False, 0.0, 0.0, 1.0, 0.0, (), 0, logged, mean_kept)
    pos = int((u > 0).sum())
    nonzero = int((u != 0).sum())
    if nonzero:
        z = (pos - nonzero / 2) / math.sqrt(nonzero / 4)
        p = 0.5 * math.erfc(z / math.sqrt(2))
    else:
        z, p = 0.0, 1.0
    share = pos / n
    median = float(np.median(u))
    qs = (0.01, 0.1, 0.5, 0.9, 0.99)
    quantiles = tuple(zip(qs, (float(v) for v in np.quantile(u, qs)), strict=True))
    detected = shift_detected(z, share, median)
    return SupportShift(
        tokens=n,
        detected=bool(detected),
        positive_share=share,
        sign_test_z=float(z),
        sign_test_p=float(p),
        median_shift=median,
        quantiles=quantiles,
        zero_rollout_logprob=int((lr == 0).sum()),
        kept_mass_logged=logged,
        mean_log_kept_mass=mean_kept,
    )
