"""NeMo-RL's spelling of the corrections: the ``loss_fn`` keys of ``ClippedPGLossFn``.

Keys and semantics are those of NVIDIA-NeMo/RL ``nemo_rl/algorithms/loss/loss_functions.py`` @
7ea279ab (``ClippedPGLossConfig``, read from the ``loss_fn:`` section of a GRPO config such as
``examples/configs/grpo_math_1B.yaml``; the module lay at
``nemo_rl/algorithms/loss_functions.py`` before v0.6.0), checked against NeMo-RL 0.6 to 0.7
(tags v0.6.0, v0.7.0). From 0.7 the config is a pydantic model that accepts unknown keys
silently, so a misspelt key would be ignored without a word: the test suite pins every key
written here against the model's field list: ``use_importance_sampling_correction``,
``truncated_importance_sampling_ratio`` (the upper bound, > 0),
``truncated_importance_sampling_ratio_min``, ``truncated_importance_sampling_type`` (``tis``:
weights clamped from above; ``icepop``: weights outside [min, max] set to 0; ``seq-mask-tis``: a
sequence whose geometric-mean weight lies outside [min, max] gets weight 0, the others keep
their untruncated token weights), ``sequence_level_importance_ratios``, and the PPO clip
``ratio_clip_min`` / ``ratio_clip_max`` (the ratio is clamped to [1 − min, 1 + max]).

The weight is exp(prev_logprobs − generation_logprobs): the training kernel's log-probs over
the inference kernel's, the contract's w, with no clamp of the log-ratio (a weight that
overflows to inf is set to 0 by ``nan_to_num``: ``tis`` and ``tis_clip``, which keep their
upper end there, and ``geo_mask``, whose kept sequences keep w, are exported only where the
guarantee's premises prove |log w| ≤ 88, ``FRAMEWORK.ratio_clamp``; the masks drop such a
token as NeMo-RL does). ``mis`` is ``icepop`` with lower bound 0 (the
comparison is ``>=``, so nothing is dropped from below). ``tis_clip`` ([lo, hi]) is the ``tis``
type with ``truncated_importance_sampling_ratio_min`` lo: weights clamped to [lo, hi], from 0.7
on (tag v0.7.0, and 7ea279ab); v0.6.0 reads the key only for ``icepop`` and ``seq-mask-tis`` and
clamps ``tis`` from above alone, so a 0.6 export is refused (``FRAMEWORK.since``).

No counterpart: ``seq_is`` and ``seq_tis`` (``sequence_level_importance_ratios`` applies W, but
it also turns the PPO ratio into the sequence's geometric mean (GSPO) and requires a
sequence-level loss, so no setting applies W alone), ``ppo_clip`` (the PPO ratio is taken
against ``prev_logprobs``, the training kernel's, and no setting makes the inference kernel
the old policy), ``tv_mask`` and ``kl_mask`` (no mask compares the distributions).
"""

from __future__ import annotations

from fractions import Fraction

from kernel_contracts.verify.pipeline.export.request import Framework, NoCounterpart, Request, Value

__all__ = ["FRAMEWORK", "settings"]

LOSS = "loss_fn."


def _truncation(kind: str, upper: Fraction, lower: Fraction | None = None):
    return (
        (LOSS + "use_importance_sampling_correction", True),
        (LOSS + "sequence_level_importance_ratios", False),
        (LOSS + "truncated_importance_sampling_type", kind),
        (LOSS + "truncated_importance_sampling_ratio", upper),
        (LOSS + "truncated_importance_sampling_ratio_min", lower),
    )


def settings(r: Request) -> tuple[tuple[str, Value], ...]:
    """NeMo-RL's ``(key, value)`` pairs for request ``r``; raises ``NoCounterpart``."""
    if r.what == "clip_budget":
        eps = r.clip_epsilon
        return ((LOSS + "ratio_clip_min", eps), (LOSS + "ratio_clip_max", eps))
    if r.what == "tis":
        return _truncation("tis", r.cap)
    if r.what == "mis":
        return _truncation("icepop", r.cap, Fraction(0))
    if r.what == "icepop":
        return _truncation("icepop", r.band[1], r.band[0])
    if r.what == "tis_clip":
        return _truncation("tis", r.band[1], r.band[0])
    if r.what == "geo_mask":
        return _truncation("seq-mask-tis", r.band[1], r.band[0])
    if r.what in ("seq_is", "seq_tis"):
        raise NoCounterpart(
            "sequence_level_importance_ratios applies W but also makes the PPO ratio the "
            "sequence's geometric mean and the loss sequence-level, so no setting applies W alone"
        )
    if r.what == "ppo_clip":
        raise NoCounterpart(
            "the PPO ratio is taken against prev_logprobs (the training kernel's); no setting "
            "makes the inference kernel the old policy"
        )
    if r.what in ("tv_mask", "kl_mask"):
        raise NoCounterpart("no loss_fn setting masks by a distance between the distributions")
    if r.what in ("dppo_tv", "dppo_kl", "dual_clip"):
        raise NoCounterpart(
            "the PPO ratio (and ratio_clip_c's dual clip) is taken against prev_logprobs (the "
            "training kernel's); no setting makes the inference kernel the old policy"
        )
    if r.what == "tis_mask":
        raise NoCounterpart("truncated_importance_sampling_type either clamps or masks, not both")
    if r.what in ("seq_mask", "seq_outlier"):
        raise NoCounterpart(
            "seq-mask-tis masks a sequence by its geometric-mean weight only, not by W or by one "
            "token's weight"
        )
    if r.what == "opsm":
        raise NoCounterpart("no loss_fn setting masks by the advantage")
    if r.what == "cispo":
        raise NoCounterpart(
            "use_cispo takes the ratio against prev_logprobs (the training kernel's); no setting "
            "makes the inference kernel the old policy"
        )
    if r.what == "gspo":
        raise NoCounterpart(
            "the sequence ratio is taken against prev_logprobs (the training kernel's); the "
            "inference kernel enters only through the importance-sampling correction (then "
            "the sequence's W), and no setting makes it the old policy"
        )
    if r.what == "tis_norm":
        raise NoCounterpart("no loss_fn setting divides the importance weights by their batch mean")
    if r.what in ("clip_cov", "kl_cov"):
        raise NoCounterpart(
            f"NeMo-RL has no {r.what} loss (no loss_fn setting selects tokens by covariance)"
        )
    raise NoCounterpart(f"no NeMo-RL mapping is known for estimator {r.what}")


FRAMEWORK = Framework(
    name="nemo-rl",
    source="NVIDIA-NeMo/RL nemo_rl/algorithms/loss/loss_functions.py@7ea279ab (loss_fn)",
    formats=("yaml", "overrides"),
    settings=settings,
    versions=("0.6", "0.7"),
    main="7ea279abfbeb698b092856d0dab61e7cf39bc909",
    since={
        "tis_clip": (
            "0.7",
            "the tis type clamps from below at truncated_importance_sampling_ratio_min from "
            "v0.7.0; v0.6.0 ignores that key for tis and clamps from above alone",
        )
    },
    # a float32 weight over e^88.72 overflows to inf and nan_to_num makes it 0, where tis and
    # tis_clip keep their cap (their upper end) and geo_mask's kept sequences w itself: these
    # need |log w| <= 88 proved
    ratio_clamp={n: Fraction(88) for n in ("tis", "tis_clip", "geo_mask")},
    beyond_clamp="exp of the log-ratio in float32, which overflows to inf above log w = 88.72, "
    "where nan_to_num sets the weight to 0",
    features={
        "seq_is": "`sequence_level_importance_ratios`",
        "seq_tis": "`sequence_level_importance_ratios` with `truncated_importance_sampling_ratio`",
        "dual_clip": "`ratio_clip_c`",
        "ppo_clip": "`ratio_clip_min/max`",
        "gspo": "`sequence_level_importance_ratios` (PPO loss)",
        "cispo": "`use_cispo`",
    },
)
