"""TRL's spelling of the corrections: keyword arguments of ``GRPOConfig``.

Keys and semantics are those of huggingface/trl ``trl/trainer/grpo_config.py`` @ 006d32c9:
``vllm_importance_sampling_correction`` (bool), ``vllm_importance_sampling_mode``
(``token_truncate``: token weights clipped from above at C; ``token_mask``: token weights
above C set to 0; ``sequence_truncate``: the sequence weight W clipped at C; ``sequence_mask``:
sequences with W above C masked out), ``vllm_importance_sampling_cap`` (C), and the PPO clip
``epsilon`` / ``epsilon_high``. The weight is exp(old − sampling log-probs): the trainer's
log-probs over vLLM's, the contract's w. The correction acts only when ``use_vllm`` is true.

No counterpart: ``icepop`` with a positive lower end (TRL's masks are one-sided; a band from 0
is ``token_mask``), ``seq_is`` (every sequence mode clips or masks at C), ``geo_mask`` (no
geometric-mean mode), ``tv_mask`` and ``kl_mask`` (``off_policy_mask_threshold`` masks
sequences with negative advantage by a sampled-token KL estimate, not by the distributions'
distance), ``ppo_clip`` (the PPO ratio is taken against the trainer's old log-probs; no setting
makes vLLM's the old policy).
"""

from __future__ import annotations

from fractions import Fraction

from verify.pipeline.export.request import Framework, NoCounterpart, Request, Value

__all__ = ["FRAMEWORK", "settings"]


def _mode(mode: str, cap: Fraction):
    return (
        ("vllm_importance_sampling_correction", True),
        ("vllm_importance_sampling_mode", mode),
        ("vllm_importance_sampling_cap", cap),
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
        if r.band[0] > 0:
            raise NoCounterpart("TRL's token_mask drops only weights above the cap")
        return _mode("token_mask", r.band[1])
    if r.what == "seq_is":
        raise NoCounterpart("every sequence mode clips or masks W at the cap")
    if r.what == "geo_mask":
        raise NoCounterpart("no vllm_importance_sampling_mode uses the geometric mean")
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
    raise NoCounterpart(f"no TRL mapping is known for estimator {r.what}")


FRAMEWORK = Framework(
    name="trl",
    source="huggingface/trl trl/trainer/grpo_config.py@006d32c9 (GRPOConfig)",
    formats=("yaml", "json"),
    settings=settings,
)
