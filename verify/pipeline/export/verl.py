"""verl's spelling of the corrections: ``algorithm.rollout_correction`` and the actor's clip.

Keys and semantics are those of verl-project/verl at these commits (the repository formerly
volcengine/verl):

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
- That clamp puts every weight in [e^−20, e^20] ≈ [2.06e−9, 4.85e8]. So an IcePop lower bound
  of 1e−9 drops nothing (it stands for the lower end 0 of ``mis`` and of an ``icepop`` band
  from 0, since verl requires a positive lower bound), and a threshold of 5e8 truncates
  nothing (untruncated token IS, and dual clip switched off through ``clip_ratio_c``).
- ``rollout_rs`` options ending in ``k1`` bound −log w (``token_k1 = -log_ratio``) between
  the logarithms of ``"lower_upper"``: they keep 1/upper ≤ w ≤ 1/lower. A ``geo_mask`` band
  [lo, hi] on the geometric mean of w is therefore ``seq_mean_k1`` with ``"1/hi_1/lo"`` (each
  written as the double nearest the exact reciprocal). Rejected sequences leave the loss
  through ``response_mask``.

No counterpart: ``seq_is`` (the clamp truncates every sequence weight at e^20, and
``rollout_is_threshold`` must be a number), ``tv_mask`` and ``kl_mask`` (verl's rejection
options see only the sampled token's log-ratio, never the full distributions), and a
``geo_mask`` band starting at 0 (its upper bound 1/0 has no finite spelling).
"""

from __future__ import annotations

from fractions import Fraction

from verify.pipeline.export.request import Framework, NoCounterpart, Request, Value, number

__all__ = ["FRAMEWORK", "settings"]

RC = "algorithm.rollout_correction."
ACTOR = "actor_rollout_ref.actor."
BELOW_FLOOR = Fraction(1, 10**9)  # < e^-20, the least weight verl computes
NO_TRUNCATION = Fraction(5 * 10**8)  # > e^20, the greatest weight verl computes


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
    if r.what == "geo_mask":
        lo, hi = r.band
        if lo <= 0:
            raise NoCounterpart("a band from 0 needs rollout_rs_threshold upper bound 1/0")
        reciprocals = f"{number(1 / hi)}_{number(1 / lo)}"
        return _decoupled("token", NO_TRUNCATION, "seq_mean_k1", reciprocals)
    if r.what == "ppo_clip":
        return (
            (RC + "rollout_is", None),
            (RC + "rollout_rs", None),
            (RC + "rollout_rs_threshold", None),
            (RC + "bypass_mode", True),
            (RC + "loss_type", "ppo_clip"),
            *_clip(r.clip_epsilon),
            (ACTOR + "clip_ratio_c", NO_TRUNCATION),
        )
    if r.what == "seq_is":
        raise NoCounterpart(
            "verl clamps every sequence weight to [e^-20, e^20] and truncates it at "
            "rollout_is_threshold, so no setting leaves W untruncated"
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
)
