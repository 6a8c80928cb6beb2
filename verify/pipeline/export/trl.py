"""TRL's spelling of the corrections: keyword arguments of ``GRPOConfig``.

Keys and semantics are those of huggingface/trl ``trl/trainer/grpo_config.py`` and
``trl/trainer/grpo_trainer.py`` @ f2cd5771 (main, 1.10.0.dev0), unchanged since v1.6.0 (and
in every release since, to v1.9.0, the latest), which
introduced the two bounds: ``vllm_importance_sampling_correction`` (bool),
``vllm_importance_sampling_mode`` (``token_truncate``: token weights clamped to
[C_min, C_max]; ``token_mask``: token weights outside [C_min, C_max] set to 0;
``sequence_truncate`` and ``sequence_mask``: the same on the sequence weight W, the product of
the token weights, applied to every token), ``vllm_importance_sampling_clip_max`` (C_max, None
for no upper bound; its default is 3.0, so it is always written) and
``vllm_importance_sampling_clip_min`` (C_min, None for no lower bound), and the PPO clip
``epsilon`` / ``epsilon_high``. ``vllm_importance_sampling_cap`` is the deprecated spelling of
C_max (a warning since 1.6, to be removed in 2.0): it is never written. The weight is
exp(old − sampling log-probs): the trainer's log-probs over vLLM's, the contract's w, with no
clamp of the log-ratio. The correction acts only when ``use_vllm`` is true.

The mapping: ``tis`` is ``token_truncate`` with C_max = c; ``mis`` is ``token_mask`` with
C_max = c; ``icepop`` [lo, hi] is ``token_mask`` with C_min = lo (None when lo = 0: a ratio is
never below 0) and C_max = hi (TRL keeps C_min ≤ w ≤ C_max, the band's closed ends);
``tis_clip`` [lo, hi] is ``token_truncate`` with C_min = lo (None for 0) and C_max = hi;
``seq_tis`` is ``sequence_truncate`` with C_max = c; ``seq_is`` is ``sequence_truncate`` with
C_min = 0 and C_max = None, a clamp that changes nothing (TRL requires one bound for a truncate
mode); ``seq_mask`` [lo, hi] is ``sequence_mask`` with C_min = lo (None for 0) and C_max = hi;
``opsm`` (δ) is that untruncated token weight with ``off_policy_mask_threshold`` δ, which keeps a
sequence when its advantage is ≥ 0 or the token mean of (vLLM's − the trainer's log-probs) is
at most δ (``get_off_policy_mask``; the trainer's log-probs there are the policy's at the
optimisation step, the old ones at a batch's first step, as for every weight here).

``vespo`` (k_pos, λ_pos, k_neg, λ_neg) is ``loss_type: vespo`` with ``vespo_k_pos``,
``vespo_lambda_pos``, ``vespo_k_neg``, ``vespo_lambda_neg``, token-level importance sampling and
``token_truncate`` with C_max = 5e8 and no C_min: ``get_gamma_weights`` forms the sequence
ratio W from the trainer-over-policy log-ratio (0 at a batch's first step) and vLLM's token
weights, each log clamped to [log 1e−8, 20] before the sum, so a C_max above e^20 changes
nothing and W is the kernel pair's sequence ratio (``kernels.rl.vespo``); the loss then skips
the separate IS factor. Present and unchanged in every release from 1.6 to 1.9.

No counterpart for ``tis_mask`` (a mode truncates or masks, never both), ``seq_outlier``, and
the losses whose ratio is taken against the trainer's old log-probs (``dppo_tv``, ``dppo_kl``,
``dual_clip``), besides those below.

No counterpart: ``geo_mask`` (no geometric-mean mode), ``tv_mask`` and ``kl_mask``
(``off_policy_mask_threshold`` masks sequences with negative advantage by a sampled-token KL
estimate, not by the distributions' distance), ``ppo_clip`` (the PPO ratio is taken against
the trainer's old log-probs; no setting makes vLLM's the old policy).
"""

from __future__ import annotations

from fractions import Fraction

from kernel_contracts.verify.pipeline.export.request import Framework, NoCounterpart, Request, Value

__all__ = ["FRAMEWORK", "settings"]

NO_TRUNCATION = Fraction(5 * 10**8)  # > e^20: VESPO clamps each log weight at 20 first


def _mode(
    mode: str,
    clip_max: Fraction | None,
    clip_min: Fraction | None = None,
    off_policy_mask: Fraction | None = None,
):
    return (
        ("vllm_importance_sampling_correction", True),
        ("vllm_importance_sampling_mode", mode),
        ("vllm_importance_sampling_clip_max", clip_max),
        ("vllm_importance_sampling_clip_min", clip_min),
        ("off_policy_mask_threshold", off_policy_mask),
    )


def settings(r: Request) -> tuple[tuple[str, Value], ...]:
    """TRL's ``(key, value)`` pairs for request ``r``; raises ``NoCounterpart``."""
    if r.what == "clip_budget":
        return (("epsilon", r.clip_epsilon), ("epsilon_high", r.clip_epsilon))
    if r.what == "tis":
        return _mode("token_truncate", r.cap)
    if r.what == "mis":
        return _mode("token_mask", r.cap)
    if r.what == "seq_tis":
        return _mode("sequence_truncate", r.cap)
    if r.what == "icepop":
        lo, hi = r.band
        return _mode("token_mask", hi, lo if lo > 0 else None)
    if r.what == "seq_is":
        return _mode("sequence_truncate", None, Fraction(0))
    if r.what == "seq_mask":
        lo, hi = r.band
        return _mode("sequence_mask", hi, lo if lo > 0 else None)
    if r.what == "tis_norm":
        raise NoCounterpart("no setting divides the importance weights by their batch mean")
    if r.what == "tis_clip":  # clamp(w, C_min, C_max); C_min appeared in 1.6 with the modes
        lo, hi = r.band
        return _mode("token_truncate", hi, lo if lo > 0 else None)
    if r.what == "opsm":  # untruncated token weights, and the advantage-aware sequence mask
        return _mode("token_truncate", None, Fraction(0), r.threshold)
    if r.what == "tis_mask":
        raise NoCounterpart("a mode either truncates or masks, never both")
    if r.what == "seq_outlier":
        raise NoCounterpart("no mode rejects a sequence for one token's weight")
    if r.what in ("dppo_tv", "dppo_kl", "dual_clip"):
        raise NoCounterpart(
            "the loss's ratio is taken against the trainer's old log-probs; no setting makes "
            "vLLM's the old policy"
        )
    if r.what == "geo_mask":
        raise NoCounterpart("no vllm_importance_sampling_mode uses the geometric mean")
    if r.what == "cispo":
        raise NoCounterpart(
            "loss_type cispo takes the ratio against the trainer's old log-probs and clamps it "
            "from above only, at epsilon_high itself; no setting makes vLLM's the old policy"
        )
    if r.what == "gspo":
        raise NoCounterpart(
            "the sequence ratio is taken against the trainer's old log-probs; vLLM's enter only "
            "through the separate vllm_importance_sampling_correction, and no setting makes them "
            "the old policy"
        )
    if r.what in ("tv_mask", "kl_mask"):
        raise NoCounterpart(
            "off_policy_mask_threshold masks negative-advantage sequences by a sampled-token KL "
            "estimate, not by a distance between the distributions"
        )
    if r.what == "ppo_clip":
        raise NoCounterpart(
            "the PPO ratio is taken against the trainer's old log-probs; no setting makes "
            "vLLM's the old policy"
        )
    if r.what == "vespo":  # vLLM's token weights make W; C_max > e^20 truncates nothing
        k_pos, lam_pos, k_neg, lam_neg = r.gamma
        return (
            ("loss_type", "vespo"),
            ("importance_sampling_level", "token"),
            ("vespo_k_pos", k_pos),
            ("vespo_lambda_pos", lam_pos),
            ("vespo_k_neg", k_neg),
            ("vespo_lambda_neg", lam_neg),
            *_mode("token_truncate", NO_TRUNCATION),
        )
    if r.what == "sapo":
        raise NoCounterpart(
            "the gate's ratio is over the trainer's old log-probs (recomputed, or the current "
            "ones detached); no setting makes vLLM's the old policy"
        )
    if r.what in ("clip_cov", "kl_cov"):
        raise NoCounterpart(f"TRL has no {r.what} loss (no loss_type selects tokens by covariance)")
    raise NoCounterpart(f"no TRL mapping is known for estimator {r.what}")


FRAMEWORK = Framework(
    name="trl",
    source="huggingface/trl trl/trainer/grpo_config.py@f2cd5771 (GRPOConfig)",
    formats=("yaml", "json"),
    settings=settings,
    versions=("1.6", "1.9"),
    main="f2cd57710ae345ea6428ae95363267fcf38a3dc8",
    since={},
    ratio_clamp={},
    features={
        "dual_clip": "`delta` (two-sided clipping of the trainer's ratio)",
        "ppo_clip": "`epsilon`, `epsilon_high`",
        "gspo": "`importance_sampling_level: sequence`",
        "cispo": "`loss_type: cispo`",
        "sapo": "`loss_type: sapo`, `sapo_temperature_pos/neg`",
    },
)
