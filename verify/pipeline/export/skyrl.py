"""SkyRL's spelling of the corrections: ``trainer.algorithm.off_policy_correction`` and the clip.

Keys and semantics are those of NovaSky-AI/SkyRL: ``skyrl/train/config/config.py``
(``OffPolicyCorrectionConfig``: ``tis_ratio_type`` (``token`` | ``sequence`` | null),
``token_tis_ratio_clip_high``, ``sequence_tis_ratio_clip_high``, ``sequence_mask_metric``
(``geometric`` | ``product`` | null), ``geo_mask_low`` / ``geo_mask_high``,
``token_mask_is_threshold_low`` / ``_high``, ``outlier_token_is_threshold_low`` / ``_high``;
``AlgorithmConfig``: ``eps_clip_low`` / ``eps_clip_high``) as read by
``skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py`` @ e9bca5e7.

What the mapping relies on, read from that code: the weight is exp(old − rollout log-probs),
the training kernel's over the inference kernel's (the contract's w), computed from the
log-ratio clamped to [−20, 20] (``safe_exp_delta(..., clip=20.0)``), so an exported weight
equals the estimator's wherever |log w| ≤ 20. Above, a weight over e^20 becomes e^20: an
estimator whose kept weights are at most a cap or band end c ≤ e^20 (``tis``, ``mis``,
``icepop``, ``seq_tis``) gives SkyRL's weight; one that keeps weights above e^20 does not, and
no lemma bounds the clamped estimator, so each is refused with one reason (``CLAMPED``):
``seq_is``, ``geo_mask`` (a sequence whose geometric mean lies in the band may hold a token
weight above e^20) and a cap or upper band end above e^20. Below, a kept weight under
e^−20 ≈ 2.06e−9 is raised to e^−20 (by less than 2.1e−9), which can pass a bound that is the
supremum (tests/bounds/test_clamp_bounds.py), so ``tis``, ``mis``, ``icepop``, ``tis_mask``
and ``seq_outlier`` are exported only where the guarantee's premises prove |log w| ≤ 20
(``FRAMEWORK.ratio_clamp``); a sequence weight W under e^−20 (``seq_tis``, a ``seq_mask`` band
from below e^−20) is raised alike, so those need |log w| ≤ 20/L proved on each of the at most L
tokens (``FRAMEWORK.sequence_clamp``). The token mask keeps
``low <= w <= high`` and needs both ends; masked tokens leave the loss through its loss mask,
and the TIS weight multiplies what is left. The keys are checked against SkyRL 0.2 to 0.3
(tags skyrl-v0.2.0, skyrl-v0.3.0, the latest release) and main at a9564572.

``dppo_tv`` and ``dppo_kl`` (τ) are ``policy_loss_type: dppo`` with ``dppo.dppo_type``
``binary_tv`` or ``binary_kl`` and ``dppo.delta_low`` = ``dppo.delta_high`` = τ
(``skyrl/backends/skyrl_train/utils/ppo_utils.py`` ``dppo_policy_loss`` @ skyrl-v0.3.0 and
a9564572; SkyRL 0.2 has no DPPO loss: ``FRAMEWORK.since``). The loss's ratio and mask compare
the policy with the rollout log-probs whenever the batch carries them, so the ratio is w at
the batch's first step, and the mask drops a token with A > 0 whose π(y) − π'(y) exceeds
``delta_high`` or with A < 0 whose π'(y) − π(y) exceeds ``delta_low`` (binary KL: where the
sampled token's binary KL exceeds the delta and π(y) moves with A), as the estimator does.
Without rollout log-probs it falls back to the old policy's, the training kernel's: the
export sets ``generator.sampling_params.logprobs: 1`` so that they are returned, and every
``off_policy_correction`` weight and mask off, which would multiply a second weight in. Two
differences remain, each accounted for. The ratio is ``safe_exp_delta(..., clip=20.0)``, the
exponential of the log-ratio clamped to [−20, 20], which passes no gradient beyond: the export
also proves, from the guarantee's own premises, |log w| ≤ 20 on every token
(``FRAMEWORK.ratio_clamp``), and writes nothing otherwise. The binary KL adds 1e−8 inside
the log of the (1 − p) term, which raises it by less than 1e−8 where π(y) < π'(y) (and lowers
it where π(y) > π'(y)); the export writes ``delta`` = τ + 1e−8 for ``binary_kl``, so SkyRL drops
only tokens whose binary KL exceeds τ, a subset of those the estimator drops, and the
estimator's bound, a step that is 0 only when nothing can be dropped, holds for it.

``cispo`` [lo, hi] is ``policy_loss_type: cispo`` with ``cispo.cispo_anchor: rollout`` and
``cispo_eps_clip_low`` = 1 − lo, ``cispo_eps_clip_high`` = hi − 1 (``compute_policy_loss_cispo``
@ a9564572: the weight is the clamp of exp(log π − log π_rollout), the log-ratio clamped to ±20,
so ``ratio_clamp`` as for DPPO), the rollout log-probs and every ``off_policy_correction`` off
(SkyRL refuses TIS with the rollout anchor); the anchor is on the main branch only
(``FRAMEWORK.since``: ``main``).

``seq_mask`` [lo, hi] is ``sequence_mask_metric: product`` (keeps ``low <= W <= high``) with
the sequence TIS at hi, which truncates no kept W; ``seq_outlier`` [lo, hi] is
``outlier_token_is_threshold_low`` / ``_high`` (a sequence is dropped when one token's w lies
outside) with the token TIS at hi; ``tis_mask`` (c, [lo, hi]) is the token TIS at c with the
token mask [lo, hi].

No counterpart: ``seq_is`` and ``geo_mask`` (``CLAMPED``), ``dual_clip`` (the policy loss's
ratio is taken against the old policy's log-probs), ``opsm``
(no setting reads the advantage), ``tv_mask`` and ``kl_mask``
(``policy_loss_type: dppo`` with ``binary_tv`` / ``binary_kl`` replaces the whole loss with a
trust region on the sampled token's probabilities, not a mask by the distributions' distance),
``ppo_clip`` (the PPO ratio is taken against the old policy's log-probs, the training
kernel's).
"""

from __future__ import annotations

import math
from fractions import Fraction

from kernel_contracts.verify.pipeline.export.request import Framework, NoCounterpart, Request, Value

__all__ = ["CLAMPED", "FRAMEWORK", "settings"]

OPC = "trainer.algorithm.off_policy_correction."
ALGO = "trainer.algorithm."
LOGPROBS = "generator.sampling_params.logprobs"
KL_EPS = Fraction(1, 10**8)  # the 1e-8 SkyRL's binary KL adds inside its log
CLAMP_TOP = Fraction(math.exp(20))  # the double nearest e^20, the greatest weight SkyRL computes
CLAMPED = (
    "SkyRL computes every weight from the log-ratio clamped to [-20, 20], so it changes each "
    "weight above e^20 that the estimator keeps (seq_is: any W; geo_mask: a token of a "
    "sequence inside the band; a cap or band end at or above e^20), and no lemma bounds the "
    "clamped estimator"
)


def _correction(
    tis: str | None = None,
    *,
    token_clip: Fraction | None = None,
    sequence_clip: Fraction | None = None,
    token_mask: tuple[Fraction, Fraction] | None = None,
    product_mask: tuple[Fraction, Fraction] | None = None,
    outlier: tuple[Fraction, Fraction] | None = None,
):
    pairs: list[tuple[str, Value]] = [(OPC + "tis_ratio_type", tis)]
    if token_clip is not None:
        pairs.append((OPC + "token_tis_ratio_clip_high", token_clip))
    if sequence_clip is not None:
        pairs.append((OPC + "sequence_tis_ratio_clip_high", sequence_clip))
    pairs.append((OPC + "sequence_mask_metric", "product" if product_mask else None))
    if product_mask:
        pairs += [
            (OPC + "product_mask_low", product_mask[0]),
            (OPC + "product_mask_high", product_mask[1]),
        ]
    low, high = token_mask if token_mask else (None, None)
    out_low, out_high = outlier if outlier else (None, None)
    pairs += [
        (OPC + "token_mask_is_threshold_low", low),
        (OPC + "token_mask_is_threshold_high", high),
        (OPC + "outlier_token_is_threshold_low", out_low),
        (OPC + "outlier_token_is_threshold_high", out_high),
    ]
    return tuple(pairs)


def settings(r: Request) -> tuple[tuple[str, Value], ...]:
    """SkyRL's ``(key, value)`` pairs for request ``r``; raises ``NoCounterpart``."""
    ends = [x for x in (r.cap, r.band[1] if r.band is not None else None) if x is not None]
    if r.what in ("seq_is", "geo_mask") or (ends and min(ends) >= CLAMP_TOP):
        raise NoCounterpart(CLAMPED)
    if r.what == "clip_budget":
        return ((ALGO + "eps_clip_low", r.clip_epsilon), (ALGO + "eps_clip_high", r.clip_epsilon))
    if r.what == "tis":
        return _correction("token", token_clip=r.cap)
    if r.what == "mis":
        return _correction("token", token_clip=r.cap, token_mask=(Fraction(0), r.cap))
    if r.what == "icepop":
        return _correction("token", token_clip=r.band[1], token_mask=r.band)
    if r.what == "seq_tis":
        return _correction("sequence", sequence_clip=r.cap)
    if r.what == "seq_mask":  # a kept W is at most hi: the sequence TIS at hi truncates nothing
        return _correction("sequence", sequence_clip=r.band[1], product_mask=r.band)
    if r.what == "seq_outlier":  # a kept token's w is at most hi: TIS at hi truncates nothing
        return _correction("token", token_clip=r.band[1], outlier=r.band)
    if r.what == "tis_mask":
        return _correction("token", token_clip=r.cap, token_mask=r.band)
    if r.what in ("dppo_tv", "dppo_kl"):
        delta = r.threshold + (KL_EPS if r.what == "dppo_kl" else 0)
        return (
            *_correction(None),
            (ALGO + "policy_loss_type", "dppo"),
            (ALGO + "dppo.dppo_type", "binary_tv" if r.what == "dppo_tv" else "binary_kl"),
            (ALGO + "dppo.delta_low", delta),
            (ALGO + "dppo.delta_high", delta),
            (LOGPROBS, 1),
        )
    if r.what == "cispo":  # anchored on the rollout: ω = clip(w, 1 − ε_low, 1 + ε_high)
        lo, hi = r.band
        return (
            *_correction(None),
            (ALGO + "policy_loss_type", "cispo"),
            (ALGO + "cispo.cispo_anchor", "rollout"),
            (ALGO + "cispo.cispo_eps_clip_low", 1 - lo),
            (ALGO + "cispo.cispo_eps_clip_high", hi - 1),
            (LOGPROBS, 1),
        )
    if r.what == "dual_clip":
        raise NoCounterpart(
            "the policy loss's ratio is taken against the old policy's log-probs (the training "
            "kernel's); no setting makes the inference kernel the old policy"
        )
    if r.what == "opsm":
        raise NoCounterpart("no off_policy_correction setting reads the advantage")
    if r.what == "gspo":
        raise NoCounterpart(
            "the gspo loss takes the sequence ratio against the old policy's log-probs (the "
            "training kernel's); the rollout's enter only through off_policy_correction, and "
            "no gspo setting anchors on them (cispo_anchor is CISPO's alone)"
        )
    if r.what == "tis_norm":
        raise NoCounterpart(
            "no off_policy_correction setting divides the weights by their batch mean"
        )
    if r.what == "tis_clip":
        raise NoCounterpart(
            "token TIS clamps from above only (token_tis_ratio_clip_high); the same weight as "
            "the CISPO loss anchored on the rollout is the estimator cispo (main branch only)"
        )
    if r.what in ("tv_mask", "kl_mask"):
        raise NoCounterpart(
            "dppo's binary_tv and binary_kl replace the loss with a trust region on the sampled "
            "token's probabilities; no setting masks by a distance between the distributions"
        )
    if r.what == "ppo_clip":
        raise NoCounterpart(
            "the PPO ratio is taken against the old policy's log-probs (the training kernel's); "
            "no setting makes the inference kernel the old policy"
        )
    if r.what == "sapo":
        raise NoCounterpart(
            "the gate's ratio is over the old policy's log-probs (the training kernel's); "
            "sapo is not among the losses that skip that forward pass for the rollout's"
        )
    if r.what in ("clip_cov", "kl_cov"):
        raise NoCounterpart(
            f"the {r.what} loss takes the ratio against the old policy's log-probs (the training "
            f"kernel's), and off_policy_correction, the only way the rollout's enter, refuses "
            f"{r.what} (NotImplementedError at set-up)"
        )
    raise NoCounterpart(f"no SkyRL mapping is known for estimator {r.what}")


FRAMEWORK = Framework(
    name="skyrl",
    source="NovaSky-AI/SkyRL skyrl/train/config/config.py@a9564572 (OffPolicyCorrectionConfig, "
    "DPPOConfig), skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py@e9bca5e7, "
    "skyrl/backends/skyrl_train/utils/ppo_utils.py@a9564572 (dppo_policy_loss)",
    formats=("yaml", "overrides"),
    settings=settings,
    versions=("0.2", "0.3"),
    main="a9564572eb8e91076be43c1bd5e4615e3de17265",
    since={
        "dppo_tv": ("0.3", "policy_loss_type dppo is added in skyrl-v0.3.0"),
        "dppo_kl": ("0.3", "policy_loss_type dppo is added in skyrl-v0.3.0"),
        "cispo": (
            "main",
            "cispo_anchor: rollout is on the main branch only, in no release up "
            "to skyrl_train-v0.4.0",
        ),
    },
    # DPPO and CISPO, and a kept token weight under e^-20 raised to e^-20, which can pass the
    # bound's supremum by up to e^-20 (tests/bounds/test_clamp_bounds.py)
    ratio_clamp={
        n: Fraction(20)
        for n in ("dppo_tv", "dppo_kl", "cispo", "tis", "mis", "icepop", "tis_mask", "seq_outlier")
    },
    # a kept W under e^-20 (the log-ratios' sum clamped) likewise: |log w| <= 20/L proved
    sequence_clamp={n: Fraction(20) for n in ("seq_tis", "seq_mask")},
    features={
        "seq_is": "`tis_ratio_type: sequence` (W clamped to e^±20)",
        "geo_mask": "`sequence_mask_metric: geometric`",
        "dual_clip": "`policy_loss_type: dual_clip`, `clip_ratio_c`",
        "ppo_clip": "`eps_clip_low/high`",
        "gspo": "`policy_loss_type: gspo`",
        "sapo": "`policy_loss_type: sapo`, `sapo.tau_pos/neg`",
        "clip_cov": "`policy_loss_type: clip_cov`, `clip_cov.clip_ratio`, `clip_cov_lb/ub` "
        "(skyrl-v0.1.0 on)",
        "kl_cov": "`policy_loss_type: kl_cov`, `kl_cov.kl_cov_frac`, `ppo_kl_coef` "
        "(skyrl-v0.1.0 on)",
    },
)
