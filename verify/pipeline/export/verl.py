"""verl's spelling of the corrections: ``algorithm.rollout_correction`` and the actor's clip.

Keys and semantics are those of verl-project/verl at these commits (the repository formerly
volcengine/verl), unchanged from v0.8.0 through v0.9.0 (the latest release) to main at 1dda039b
(0.10.0.dev):

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
  whose lower end is at least e^−20 drops those tokens exactly as verl does. The raise can pass
  a bound that is the supremum (tests/bounds/test_clamp_bounds.py), so the token estimators
  that can keep such a weight (``tis``, ``mis``, ``icepop``, ``tis_mask``, ``tis_norm``) are
  exported only where the guarantee's premises prove |log w| ≤ 20 (``FRAMEWORK.ratio_clamp``).
  A sequence weight W under e^−20 (``seq_tis``, a ``seq_mask`` band from below e^−20) is raised
  alike; those are exported only where the premises prove |log w| ≤ 20/L on each of the at most
  L tokens, so that |log W| ≤ 20 (``FRAMEWORK.sequence_clamp``).
- So an IcePop lower bound of 1e−9 drops nothing (it stands for the lower end 0 of ``mis`` and
  of an ``icepop`` band from 0, since verl requires a positive lower bound), and a threshold of
  5e8 truncates nothing (dual clip switched off through ``clip_ratio_c``).
- The IcePop threshold string ``"lower_upper"`` is read by verl from v0.8.0 on (the first
  release after it was added in March 2026; earlier releases take a number only), so the keys
  are checked against verl 0.8 to 0.9 and main at 1dda039b (``FRAMEWORK.versions``,
  ``FRAMEWORK.main``).

- ``seq_mask`` [lo, hi] is IcePop at sequence level (``rollout_is: sequence`` with
  ``"lo_hi"``); ``tis_norm`` (c) is token TIS at c with ``rollout_is_batch_normalize: true``;
  ``tis_mask`` (c, [lo, hi]) is token TIS at c with the rejection option
  ``token_k1``, which keeps log(lower) ≤ −log w ≤ log(upper), written ``"1/hi_1/lo"`` (each the
  double nearest the exact reciprocal; lo > 0); ``dual_clip`` (ε, c) is bypass mode
  (``old_log_prob`` = the rollout's, so the PPO ratio is w) with ``loss_type: ppo_clip`` and
  ``clip_ratio_c`` c: for A < 0 the loss is the constant c·A once w > c, so its gradient drops
  the token, as the estimator does. The clamp passes no gradient beyond ±20 there, so a token
  with w < e^−20 and A > 0 loses its weight (under 2.1e−9) and one above e^20 is dropped by both.

- ``kl_reject`` is verl's own rejection: ``rollout_rs`` and ``rollout_rs_threshold`` are the
  contract's ``reject`` and ``reject_threshold`` strings (parsed alike: comma-separated
  options, one threshold or one each, ``"b"`` alone for k1 meaning ``"1/b_b"``), with the token
  IS weight untruncated (``rollout_is: token``, threshold 5e8 > e^20): verl multiplies the IS
  weight by the rejection mask, so the weight is w where every option keeps the token. verl
  judges each option on the log-ratio clamped to [−20, 20]. A token option (k1 with
  e^−20 < a, b < e^20, i.e. −20 < log a, log b < 20; k2 with τ < 200 = 20²/2; k3 with
  τ < 19 < e^−20 + 19) decides every token as on the exact log-ratio, and keeps only tokens with
  |log w| < 20. A ``seq_max`` or ``seq_sum`` option of k2 or k3 with those τ also drops every
  sequence holding a token with |log w| > 20, on the clamped and on the exact values alike (each
  such token alone adds at least 200, or k3(−20) > 19), so with one of them in the chain every
  option decides as on the exact values. Any other chain (``seq_mean_k*``, ``seq_sum_k1``, or an
  option beyond those limits, without such a guard) is refused (``REJECT_CLAMPED``). These
  option names and threshold strings are verl's from v0.7.1 on (v0.7.0 took ``token``,
  ``sequence`` or ``geometric``), unchanged to 1dda039b but for v0.9.0's added check that a
  k1 band's lower end is at most its upper end, which a contract's band always meets.

No counterpart: ``seq_is``, ``geo_mask`` and ``ppo_clip`` (``CLAMPED``, above), ``tv_mask`` and
``kl_mask`` (verl's rejection options see only the sampled token's log-ratio, never the full
distributions), ``dppo_tv`` and ``dppo_kl`` (``core_algos.py``: those policy losses take their
ratio against the training kernel's ``old_log_prob`` and truncate the kept ratio at
``clip_ratio_c``, 3.0 by default; bypass mode, which makes the rollout the old policy, replaces
the policy loss with its own, ``loss_type`` ``ppo_clip`` or ``reinforce``),
``opsm`` (no option reads the advantage) and ``seq_outlier`` (``seq_max_k2`` / ``seq_max_k3``
bound (log w)²/2 or w − 1 − log w, not an arbitrary band).
"""

from __future__ import annotations

import math
from fractions import Fraction

from kernel_contracts.contracts.rejection import Criterion, RejectionError, parse_rejection
from kernel_contracts.verify.pipeline.export.request import (
    Framework,
    NoCounterpart,
    Request,
    Value,
    number,
)

__all__ = ["CLAMPED", "FRAMEWORK", "REJECT_CLAMPED", "settings"]

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
REJECT_CLAMPED = (
    "verl judges each rollout_rs option on the log-ratio clamped to [-20, 20], so a sequence "
    "sum or mean (seq_sum_k1, seq_mean_k*) or an option whose threshold lies beyond the clamp "
    "can keep what the exact log-ratios drop, or the reverse, and a kept weight can exceed "
    "e^20; it is exported only when every option is a token option inside the clamp (k1 band "
    "within (e^-20, e^20), k2 threshold < 200, k3 threshold < 19) or the chain holds a seq_max "
    "or seq_sum option of k2 or k3 inside it, which drops every sequence the clamp would change"
)
K2_LIMIT, K3_LIMIT = 200.0, 19.0  # k2(±20) = 200; k3(20) > k3(-20) = e^-20 + 19 > 19


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


def _inside(c: Criterion) -> bool:
    """Whether option ``c`` decides every token or sequence as on the exact log-ratios, the
    first time a log-ratio lies beyond ±20 included (verl compares with ``math.log`` of the same
    doubles)."""
    if c.k == 1:
        return c.level == "token" and math.log(c.a) > -20 and math.log(c.b) < 20
    if c.level == "seq_mean":
        return False
    return c.tau < (K2_LIMIT if c.k == 2 else K3_LIMIT)


def _kl_reject(r: Request) -> tuple[tuple[str, Value], ...]:
    try:
        criteria = parse_rejection(r.reject, r.reject_threshold)
    except RejectionError as err:  # a contract's guarantee was checked when it was loaded
        raise NoCounterpart(str(err)) from None
    guard = any(_inside(c) and c.level in ("seq_max", "seq_sum") for c in criteria)
    if not (guard or all(_inside(c) for c in criteria)):
        raise NoCounterpart(REJECT_CLAMPED)
    return _decoupled("token", NO_TRUNCATION, r.reject, r.reject_threshold)


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
    if r.what == "kl_reject":
        return _kl_reject(r)
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
            "training kernel's) and truncates the kept ratio at clip_ratio_c (3.0 by default), "
            "and bypass mode, which makes the rollout the old policy, replaces the policy loss "
            "with loss_type ppo_clip or reinforce"
        )
    if r.what == "opsm":
        raise NoCounterpart("no rollout_rs option reads the advantage")
    if r.what == "cispo":
        raise NoCounterpart(
            "the cispo policy loss takes the ratio against old_log_prob (the training kernel's), "
            "and bypass mode, which makes the rollout the old policy, replaces the policy loss "
            "with loss_type ppo_clip or reinforce"
        )
    if r.what == "gspo":
        raise NoCounterpart(
            "the gspo policy loss takes the sequence ratio against old_log_prob (the training "
            "kernel's), and bypass mode, which makes the rollout the old policy, replaces the "
            "policy loss with loss_type ppo_clip or reinforce"
        )
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
    if r.what == "sapo":
        raise NoCounterpart(
            "the gate's ratio is over old_log_prob, the training kernel's (log_prob.detach() "
            "on policy); bypass mode, which makes the rollout the old policy, replaces the "
            "policy loss with ppo_clip or reinforce"
        )
    if r.what in ("clip_cov", "kl_cov"):
        raise NoCounterpart(
            f"the {r.what} policy loss takes the ratio against old_log_prob (the training "
            "kernel's) and its covariance against the current log-probs; bypass mode, which "
            "makes the rollout the old policy, replaces the policy loss with ppo_clip or reinforce"
        )
    raise NoCounterpart(f"no verl mapping is known for estimator {r.what}")


FRAMEWORK = Framework(
    name="verl",
    source="verl-project/verl verl/trainer/config/algorithm.py@0482624a, "
    "verl/trainer/ppo/rollout_corr_helper.py@20c30bf8, "
    "verl/trainer/config/actor/actor.yaml@018f23b5",
    formats=("yaml", "overrides"),
    settings=settings,
    versions=("0.8", "0.9"),
    main="1dda039b9c6311889a9c9a26040677e1254814f9",
    since={},
    # a kept token weight under e^-20 becomes e^-20, which can pass the bound's supremum by up
    # to e^-20 (tests/bounds/test_clamp_bounds.py): these need |log w| <= 20 proved
    ratio_clamp={n: Fraction(20) for n in ("tis", "mis", "icepop", "tis_mask", "tis_norm")},
    # a kept W under e^-20 (the log-ratios' sum clamped) likewise: |log w| <= 20/L proved
    sequence_clamp={n: Fraction(20) for n in ("seq_tis", "seq_mask")},
    features={
        "seq_is": "`rollout_is: sequence` (W clamped to e^±20)",
        "geo_mask": "`rollout_rs: seq_mean_k1`",
        "seq_outlier": "`rollout_rs: seq_max_k2`, `seq_max_k3`",
        "ppo_clip": "`clip_ratio_low/high`, in bypass mode",
        "dppo_tv": "`policy_loss.loss_mode: dppo_tv`",
        "dppo_kl": "`policy_loss.loss_mode: dppo_kl`",
        "gspo": "`policy_loss.loss_mode: gspo`",
        "cispo": "`policy_loss.loss_mode: cispo`",
        "sapo": "`policy_loss.loss_mode: sapo`, `tau_pos`, `tau_neg`",
        "clip_cov": "`policy_loss.loss_mode: clip_cov`, `clip_cov_ratio`, `clip_cov_lb/ub` "
        "(v0.4.1 on)",
        "kl_cov": "`policy_loss.loss_mode: kl_cov`, `kl_cov_ratio`, `ppo_kl_coef` (v0.4.1 on)",
    },
)
