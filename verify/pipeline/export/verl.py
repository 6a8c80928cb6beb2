"""verl's spelling of the corrections: ``algorithm.rollout_correction`` and the actor's clip.

Keys and semantics are those of verl-project/verl at these commits (the repository formerly
volcengine/verl), unchanged from v0.8.0 to 1dda039b (0.10.0.dev):

- ``verl/trainer/config/algorithm.py`` @ 0482624a: ``RolloutCorrectionConfig`` with
  ``rollout_is`` (``token`` | ``sequence`` | null), ``rollout_is_threshold`` (a number: TIS,
  weights clamped from above; a ``"lower_upper"`` string: IcePop, weights outside
  [lower, upper] set to 0), ``rollout_is_batch_normalize``, ``rollout_rs`` (comma-separated
  rejection options such as ``token_k1``, ``seq_mean_k1``), ``rollout_rs_threshold``,
  ``bypass_mode`` and ``loss_type`` (``ppo_clip`` | ``reinforce``, bypass mode only);
- ``verl/trainer/ppo/rollout_corr_helper.py`` @ 20c30bf8: how those are applied;
- ``verl/trainer/config/actor/actor.yaml`` @ 018f23b5: ``actor_rollout_ref.actor.clip_ratio``,
  ``clip_ratio_low``, ``clip_ratio_high`` and ``clip_ratio_c`` (dual clip: for A < 0 the loss
  stops growing once the ratio passes C).

What the mapping relies on, read from that code:

- The ratio is w = π_old/π_rollout in decoupled mode (``bypass_mode: false``), π_old being the
  training kernel's log-probs at the rollout's weights: the contract's w. Every ratio is
  computed as exp of the log-ratio clamped to [−20, 20] (``SAFETY_BOUND``), so an exported
  weight equals the estimator's wherever |log w| ≤ 20 (|log W| for a sequence weight).
- Above: a weight over e^20 becomes e^20. An estimator whose kept weights are at most its cap
  or band end c ≤ e^20 (``tis``, ``mis``, ``icepop``, ``seq_tis``) gives the same weight as
  verl's: min(e^20, c) = c and a dropped weight stays dropped. An estimator that keeps weights
  above e^20 does not, and no lemma bounds the clamped estimator, so each is refused with one
  reason (``CLAMPED``): ``seq_is`` (W is never truncated), ``geo_mask`` (a sequence whose
  geometric mean lies in the band may hold a token weight above e^20), and a cap or upper band
  end above e^20.
- Below: a weight under e^−20 ≈ 2.06e−9 becomes e^−20, so a kept weight under e^−20 (``tis``,
  ``seq_tis``, ``mis`` and an ``icepop`` band from 0) is raised by less than 2.1e−9; a band
  whose lower end is at least e^−20 drops those tokens exactly as verl does.
- So an IcePop lower bound of 1e−9 drops nothing (it stands for the lower end 0 of ``mis`` and
  of an ``icepop`` band from 0, since verl requires a positive lower bound), and a threshold of
  5e8 truncates nothing (dual clip switched off through ``clip_ratio_c``).
- The IcePop threshold string ``"lower_upper"`` is read by verl from v0.8.0 on (the first
  release after it was added in March 2026; earlier releases take a number only), so the keys
  are checked against verl 0.8 to 0.10 (``FRAMEWORK.versions``).

- ``seq_mask`` [lo, hi] is IcePop at sequence level (``rollout_is: sequence`` with
  ``"lo_hi"``); ``tis_norm`` (c) is token TIS at c with ``rollout_is_batch_normalize: true``;
  ``tis_mask`` (c, [lo, hi]) is token TIS at c with the rejection option
  ``token_k1``, which keeps log(lower) ≤ −log w ≤ log(upper), written ``"1/hi_1/lo"`` (each the
  double nearest the exact reciprocal; lo > 0); ``dual_clip`` (ε, c) is bypass mode
  (``old_log_prob`` = the rollout's, so the PPO ratio is w) with ``loss_type: ppo_clip`` and
  ``clip_ratio_c`` c: for A < 0 the loss is the constant c·A once w > c, so its gradient drops
  the token, as the estimator does. The clamp passes no gradient beyond ±20 there, so a token
  with w < e^−20 and A > 0 loses its weight (under 2.1e−9) and one above e^20 is dropped by both.

No counterpart: ``seq_is``, ``geo_mask`` and ``ppo_clip`` (``CLAMPED``, above), ``tv_mask`` and
``kl_mask`` (verl's rejection options see only the sampled token's log-ratio, never the full
distributions), ``dppo_tv`` and ``dppo_kl`` (those policy losses take their ratio against the
training kernel's ``old_log_prob``; bypass mode takes ``ppo_clip`` or ``reinforce`` only),
``opsm`` (no option reads the advantage) and ``seq_outlier`` (``seq_max_k2`` / ``seq_max_k3``
bound (log w)²/2 or w − 1 − log w, not an arbitrary band).
"""

from __future__ import annotations

import math
from fractions import Fraction

from kernel_contracts.verify.pipeline.export.request import (
    Framework,
    NoCounterpart,
    Request,
    Value,
    number,
)

__all__ = ["CLAMPED", "FRAMEWORK", "settings"]

RC = "algorithm.rollout_correction."
ACTOR = "actor_rollout_ref.actor."
BELOW_FLOOR = Fraction(1, 10**9)  # < e^-20, the least weight verl computes
NO_TRUNCATION = Fraction(5 * 10**8)  # > e^20, the greatest weight verl computes
CLAMP_TOP = Fraction(math.exp(20))  # the double nearest e^20
# estimators that keep some weight however large: the clamp changes them whatever the parameters
UNBOUNDED = ("seq_is", "geo_mask", "ppo_clip")
CLAMPED = (
    "verl computes every weight from the log-ratio clamped to [-20, 20], so it changes each "
    "weight above e^20 that the estimator keeps (seq_is: any W; geo_mask: a token of a "
    "sequence inside the band; ppo_clip: a token with A < 0; a cap or band end at or above "
    "e^20), and no lemma bounds the clamped estimator"
)


def _top(r: Request) -> Fraction:
    """The greatest weight request ``r``'s estimator keeps, when a cap or band end bounds it."""
    ends = [x for x in (r.cap, r.band[1] if r.band is not None else None) if x is not None]
    return min(ends) if ends else Fraction(0)


def _decoupled(level: str | None, threshold: Value, rs: str | None = None, rs_threshold=None):
    pairs = [(RC + "rollout_is", level)]
    if level is not None:
        pairs.append((RC + "rollout_is_threshold", threshold))
    pairs += [
        (RC + "rollout_is_batch_normalize", False),
        (RC + "rollout_rs", rs),
        (RC + "rollout_rs_threshold", rs_threshold),
        (RC + "bypass_mode", False),
    ]
    return tuple(pairs)


def _icepop(lo: Fraction, hi: Fraction) -> str:
    return f"{number(lo if lo > 0 else BELOW_FLOOR)}_{number(hi)}"


def _clip(eps: Fraction) -> tuple[tuple[str, Value], ...]:
    return tuple((ACTOR + k, eps) for k in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"))


def settings(r: Request) -> tuple[tuple[str, Value], ...]:
    """verl's ``(key, value)`` pairs for request ``r``; raises ``NoCounterpart``."""
    if r.what in UNBOUNDED or _top(r) >= CLAMP_TOP:
        raise NoCounterpart(CLAMPED)
    if r.what == "clip_budget":
        return _clip(r.clip_epsilon)
    if r.what == "tis":
        return _decoupled("token", r.cap)
    if r.what == "mis":
        return _decoupled("token", _icepop(Fraction(0), r.cap))
    if r.what == "icepop":
        return _decoupled("token", _icepop(*r.band))
    if r.what == "seq_tis":
        return _decoupled("sequence", r.cap)
    if r.what == "seq_mask":
        return _decoupled("sequence", _icepop(*r.band))
    if r.what == "tis_mask":
        lo, hi = r.band
        if lo <= 0:
            raise NoCounterpart("a band from 0 needs the token_k1 upper bound 1/0")
        return _decoupled("token", r.cap, "token_k1", f"{number(1 / hi)}_{number(1 / lo)}")
    if r.what == "dual_clip":
        return (
            (RC + "rollout_is", None),
            (RC + "rollout_rs", None),
            (RC + "rollout_rs_threshold", None),
            (RC + "bypass_mode", True),
            (RC + "loss_type", "ppo_clip"),
            *_clip(r.clip_epsilon),
            (ACTOR + "clip_ratio_c", r.cap),
        )
    if r.what in ("dppo_tv", "dppo_kl"):
        raise NoCounterpart(
            f"the {r.what} policy loss compares the current policy with old_log_prob (the "
            "training kernel's), and bypass mode, which makes the rollout the old policy, takes "
            "loss_type ppo_clip or reinforce only"
        )
    if r.what == "opsm":
        raise NoCounterpart("no rollout_rs option reads the advantage")
    if r.what == "tis_norm":  # token TIS at c, divided by the batch's mean weight
        return tuple(
            (k, True if k == RC + "rollout_is_batch_normalize" else v)
            for k, v in _decoupled("token", r.cap)
        )
    if r.what == "tis_clip":
        raise NoCounterpart(
            "rollout_is truncates the weight from above only; a lower threshold masks the token "
            "instead of raising its weight to the floor"
        )
    if r.what == "seq_outlier":
        raise NoCounterpart(
            "seq_max_k2 and seq_max_k3 reject a sequence by its largest (log w)^2/2 or "
            "w - 1 - log w, which no band [lo, hi] spells in general, and k1 has no max option"
        )
    if r.what in ("tv_mask", "kl_mask"):
        raise NoCounterpart(
            "verl's rollout_rs options see only the sampled token's log-ratio, not the "
            "distributions a TV or KL mask compares"
        )
    raise NoCounterpart(f"no verl mapping is known for estimator {r.what}")


FRAMEWORK = Framework(
    name="verl",
    source="verl-project/verl verl/trainer/config/algorithm.py@0482624a, "
    "verl/trainer/ppo/rollout_corr_helper.py@20c30bf8, "
    "verl/trainer/config/actor/actor.yaml@018f23b5",
    formats=("yaml", "overrides"),
    settings=settings,
    versions=("0.8", "0.10"),
)
