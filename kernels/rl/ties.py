"""How each RL framework decides a token that sits exactly on an estimator's threshold.

A mask keeps or drops a token by comparing a statistic with a threshold, and a framework's
code fixes three things the estimator's formula leaves open: which statistic it compares (the
rounded ratio w = exp(log w), the log-ratio itself, or −log w against the log of a reciprocal
threshold), whether equality keeps or drops, and, for a weight that is the gradient of a
surrogate loss with ``min``/``max``, what autograd gives where the two sides are equal
(PyTorch splits the gradient of ``minimum``/``maximum`` at a tie, half to each side; its
``clamp`` passes the whole gradient at either end). In exact arithmetic w = hi almost never
happens, but the rounded statistic lands on the threshold, so two codes that agree on the
formula still differ on these tokens.

``TIE_RULES`` holds one ``TieRule`` per (framework, estimator) for every estimator a framework
has (``exported`` says whether ``verify export`` writes settings for it), and ``OURS`` holds
``kernels.rl.correction_weights``'s own rule. ``correction_weights(..., ties=framework)``
computes each estimator's weight by the framework's rule, so that the weight matches the
framework's on tied tokens too; the bounds of ``bounds.pg`` hold for every rule (a tied token's
weight is w, 0 or w/2: ``tests/bounds/test_tie_bounds.py``).

The frameworks' code, read at: verl 1dda039b (``verl/trainer/ppo/rollout_corr_helper.py``,
``verl/trainer/ppo/core_algos.py``), TRL f2cd5771 (``trl/trainer/grpo_trainer.py``), NeMo-RL
7ea279ab (``nemo_rl/algorithms/loss/loss_functions.py``), SkyRL a9564572
(``skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py``, ``.../ppo_utils.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "AT_TIE",
    "CLAMPS",
    "FRAMEWORKS",
    "LOG_RATIO_CLAMP",
    "OURS",
    "SPACES",
    "TIE_RULES",
    "TieRule",
    "tie_rule",
    "tie_table",
]

# the frameworks, spelt as ``verify export`` names them
FRAMEWORKS: tuple[str, ...] = ("verl", "nemo-rl", "trl", "skyrl")

# what a rule compares with the threshold, each with one line of meaning
SPACES: Mapping[str, str] = MappingProxyType(
    {
        "value": "no mask: the weight min(w, c) is the same number whichever side wins",
        "ratio": "the rounded ratio w = exp(log w) (W, or the geometric mean, for a sequence)",
        "log": "log w (the sum or mean of log w for a sequence) against the log of the threshold",
        "k1": "−log w against log(1/hi) and log(1/lo) (verl's token_k1 rejection)",
        "prob": "the sampled token's probabilities π(y), π'(y) or their binary KL",
        "loss": "the surrogate losses −A·w, −A·clip(w, 1 − ε, 1 + ε) and −A·c (their gradient)",
        "cov": "the batch's covariances (A − mean A)(log π − mean log π): a band, or a ranking",
    }
)
# what a token exactly on the threshold gets
AT_TIE: Mapping[str, str] = MappingProxyType(
    {
        "keep": "ω = w: equality keeps the token (a closed band, a strict drop test)",
        "half": "ω = w/2 at −A·w = −A·c: the gradient of min splits between two equal losses",
        "first": "equal covariances: the first by position (torch.topk leaves the order open)",
    }
)

# verl's and SkyRL's bound on |log w| before exp (verl ``SAFETY_BOUND``, SkyRL ``safe_exp_delta``)
LOG_RATIO_CLAMP = 20.0
# how a framework's clamp of log w to [−20, 20] enters the weight, each with one line of meaning
CLAMPS: Mapping[str, str] = MappingProxyType(
    {
        "value": "w = exp(log w clamped to ±20) (a sequence's sum of log w, clamped) wherever "
        "the rule reads w; the masks on probabilities read the unclamped ones",
        "gradient": "the loss takes exp of the clamped log w, whose gradient is 0 beyond ±20: "
        "ω = 0 where |log w| > 20 (torch 2.11 passes the gradient at ±20 exactly)",
    }
)

VERL = "verl@1dda039b"
TRL = "trl@f2cd5771 trl/trainer/grpo_trainer.py"
NEMO = "nemo-rl@7ea279ab nemo_rl/algorithms/loss/loss_functions.py"
SKYRL = "skyrl@a9564572"
VERL_LOSS = VERL + " verl/trainer/ppo/core_algos.py"
SKYRL_LOSS = SKYRL + " skyrl/backends/skyrl_train/utils/ppo_utils.py"


@dataclass(frozen=True)
class TieRule:
    """One framework's test for one estimator: what it compares (``space``, a key of
    ``SPACES``), the test as its code writes it (``test``), what a tied token gets (``at_tie``,
    a key of ``AT_TIE``), whether ``verify export`` writes settings for the pair, where the
    code lies (``source``), and how the framework's clamp of log w to ±``LOG_RATIO_CLAMP``
    enters the weight (``clamp``, a key of ``CLAMPS``, or None for no clamp)."""

    space: str
    test: str
    at_tie: str = "keep"
    exported: bool = True
    source: str = ""
    clamp: str | None = None


_TIS = TieRule("value", "clamp(w, max=c)")
_MIS = TieRule("ratio", "keeps w ≤ c")
_ICEPOP = TieRule("ratio", "keeps lo ≤ w ≤ hi")
_SEQ_TIS = TieRule("value", "clamp(W, max=c)")
_TIS_CLIP = TieRule("value", "clamp(w, min=lo, max=hi)")
_DUAL = TieRule(
    "loss",
    "A < 0: min(max(−A·w, −A·clip(w)), −A·c)",
    at_tie="half",
    exported=False,
)
_DPPO_TV = TieRule("prob", "drops π − π' > δ (A > 0), π' − π > δ (A < 0)", exported=False)
_DPPO_KL = TieRule("prob", "drops binary KL > δ where π moves with A", exported=False)
_GSPO = TieRule("ratio", "keeps s ≤ 1 + ε (A > 0), s ≥ 1 − ε (A < 0)", exported=False)
_CISPO = TieRule("value", "clamp(w, min=1 − ε_low, max=1 + ε_high)", exported=False)
_CISPO_20 = dataclasses.replace(_CISPO, test="clamp(exp(clamp(log w, ±20)), 1 − ε_low, 1 + ε_high)")
_GSPO_10 = dataclasses.replace(_GSPO, test=_GSPO.test + ", log s ≤ 10")
# SAPO's gate is smooth: no threshold. Every framework's r is π_θ over the trainer's old
# log-probs, never the rollout's, so none is exported (verify/pipeline/export, docs/rl.md)
_SAPO_CLAMPED = TieRule("value", "4/τ·σ(τ(r − 1)), r = exp(clamp(log r, ±20))", exported=False)
# VESPO's weight is smooth in W; (k, λ) switch at A = 0, where the token's term A·ω is 0 anyway
_VESPO = TieRule("value", "φ(W), (k, λ) of A ≥ 0, log W clamped to [log 1e−8, 20]")
# the covariance losses: PPO's max splits at 1 ± ε; the band lb < cov < ub is open; the draw
# among the candidates is random (ours: the largest w), KL-Cov's top-k order among equal cov
# is torch's. The ratio is over the trainer's old log-probs in both frameworks: not exported
_CLIP_COV = TieRule(
    "loss",
    "max(−A·w, −A·clip(w, 1 ± ε)); drops max(⌊ρn⌋, 1) drawn of lb < cov < ub",
    at_tie="half",
    exported=False,
)
_KL_COV = TieRule("cov", "κ·abs(log w) on the top max(⌊ρn⌋, 1) cov", at_tie="first", exported=False)


def _at(source: str, rules: dict[str, TieRule]) -> Mapping[str, TieRule]:
    """``rules`` with ``source`` filled in where a rule names none."""
    return MappingProxyType(
        {k: dataclasses.replace(r, source=r.source or source) for k, r in rules.items()}
    )


def _clamping(
    rules: dict[str, TieRule], value: tuple[str, ...], gradient: tuple[str, ...]
) -> dict[str, TieRule]:
    """``rules`` with the clamp of log w: ``value`` read the clamped w, ``gradient`` get none
    of the gradient beyond the clamp (``CLAMPS``)."""
    out = dict(rules)
    for names, how in ((value, "value"), (gradient, "gradient")):
        out |= {n: dataclasses.replace(out[n], clamp=how) for n in names}
    return out


TIE_RULES: Mapping[str, Mapping[str, TieRule]] = MappingProxyType(
    {
        "verl": _at(
            VERL + " verl/trainer/ppo/rollout_corr_helper.py",
            _clamping(
                {
                    "tis": _TIS,
                    "mis": TieRule("ratio", "keeps 1e−9 ≤ w ≤ c"),
                    "icepop": _ICEPOP,
                    "seq_tis": _SEQ_TIS,
                    "seq_mask": TieRule("ratio", "keeps lo ≤ W ≤ hi"),
                    "tis_mask": TieRule("k1", "keeps log(1/hi) ≤ −log w ≤ log(1/lo)"),
                    "tis_norm": TieRule("value", "clamp(w, max=c)/batch mean"),
                    "kl_reject": TieRule(
                        "log", "keeps log a ≤ k1 ≤ log b, k2, k3 ≤ τ of log w in ±20"
                    ),
                    "dual_clip": dataclasses.replace(_DUAL, exported=True, source=VERL_LOSS),
                    "dppo_tv": TieRule(
                        "prob",
                        "keeps π − π' ≤ δ (A > 0), π − π' ≥ −δ (A ≤ 0)",
                        exported=False,
                        source=VERL_LOSS,
                    ),
                    "dppo_kl": TieRule(
                        "prob",
                        "keeps binary KL ≤ δ or π moving against A",
                        exported=False,
                        source=VERL_LOSS,
                    ),
                    "gspo": dataclasses.replace(_GSPO_10, source=VERL_LOSS),
                    "cispo": dataclasses.replace(_CISPO_20, source=VERL_LOSS),
                    "sapo": dataclasses.replace(_SAPO_CLAMPED, source=VERL_LOSS),
                    "clip_cov": dataclasses.replace(_CLIP_COV, source=VERL_LOSS),
                    "kl_cov": dataclasses.replace(_KL_COV, source=VERL_LOSS),
                },
                value=(
                    "tis",
                    "mis",
                    "icepop",
                    "seq_tis",
                    "seq_mask",
                    "tis_mask",
                    "tis_norm",
                    "kl_reject",
                    "dppo_tv",
                    "dppo_kl",
                    "cispo",
                ),
                gradient=("dual_clip", "sapo"),
            ),
        ),
        "trl": _at(
            TRL,
            {
                "tis": _TIS,
                "mis": _MIS,
                "icepop": _ICEPOP,
                "seq_tis": _SEQ_TIS,
                "seq_is": TieRule("value", "clamp(W, min=0)"),
                "seq_mask": TieRule("ratio", "keeps lo ≤ W ≤ hi"),
                "opsm": TieRule("log", "keeps A ≥ 0 or mean(log π' − log π) ≤ δ"),
                "tis_clip": _TIS_CLIP,
                "gspo": _GSPO,
                "sapo": TieRule("value", "4/τ·σ(τ(r − 1))", exported=False),
                "vespo": _VESPO,
            },
        ),
        "nemo-rl": _at(
            NEMO,
            {
                "tis": _TIS,
                "mis": TieRule("ratio", "keeps 0 ≤ w ≤ c"),
                "icepop": _ICEPOP,
                "geo_mask": TieRule("ratio", "keeps lo ≤ exp(mean log w) ≤ hi"),
                "dual_clip": _DUAL,
                "tis_clip": _TIS_CLIP,
                "gspo": _GSPO,
                "cispo": _CISPO,
            },
        ),
        "skyrl": _at(
            SKYRL + " skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py",
            _clamping(
                {
                    "tis": _TIS,
                    "mis": TieRule("ratio", "keeps 0 ≤ w ≤ c"),
                    "icepop": _ICEPOP,
                    "seq_tis": _SEQ_TIS,
                    "seq_mask": TieRule("ratio", "drops W > hi or W < lo"),
                    "seq_outlier": TieRule("ratio", "drops a sequence with a w > hi or w < lo"),
                    "tis_mask": TieRule("ratio", "keeps lo ≤ w ≤ hi"),
                    "dual_clip": dataclasses.replace(_DUAL, source=SKYRL_LOSS),
                    "dppo_tv": dataclasses.replace(_DPPO_TV, exported=True, source=SKYRL_LOSS),
                    "dppo_kl": dataclasses.replace(_DPPO_KL, exported=True, source=SKYRL_LOSS),
                    "gspo": dataclasses.replace(_GSPO_10, source=SKYRL_LOSS),
                    "cispo": dataclasses.replace(_CISPO_20, exported=True, source=SKYRL_LOSS),
                    "sapo": dataclasses.replace(_SAPO_CLAMPED, source=SKYRL_LOSS),
                    "clip_cov": dataclasses.replace(_CLIP_COV, source=SKYRL_LOSS),
                    "kl_cov": dataclasses.replace(_KL_COV, source=SKYRL_LOSS),
                },
                value=(
                    "tis",
                    "mis",
                    "icepop",
                    "seq_tis",
                    "seq_mask",
                    "seq_outlier",
                    "tis_mask",
                    "cispo",
                ),
                gradient=("dual_clip", "dppo_tv", "dppo_kl", "sapo"),
            ),
        ),
    }
)

# correction_weights' own rule (ties=None), for every estimator
OURS: Mapping[str, TieRule] = _at(
    "kernels/rl/estimators.py",
    {
        "plain": TieRule("value", "ω = 1"),
        "tis": TieRule("value", "min(w, c)"),
        "mis": TieRule("log", "keeps log w ≤ log c"),
        "ppo_clip": TieRule("ratio", "drops w > 1 + ε (A > 0), w < 1 − ε (A < 0)"),
        "icepop": _ICEPOP,
        "seq_is": TieRule("value", "ω = W"),
        "seq_tis": TieRule("value", "min(W, c)"),
        "geo_mask": TieRule("log", "keeps log lo ≤ mean log w ≤ log hi"),
        "tv_mask": TieRule("prob", "drops TV > τ"),
        "kl_mask": TieRule("prob", "drops KL > τ"),
        "dppo_tv": _DPPO_TV,
        "dppo_kl": _DPPO_KL,
        "dual_clip": TieRule("ratio", "ppo_clip, and drops w > c (A < 0)"),
        "seq_mask": TieRule("log", "keeps log lo ≤ Σ log w ≤ log hi"),
        "seq_outlier": TieRule("ratio", "drops a sequence with a w > hi or w < lo"),
        "tis_mask": TieRule("ratio", "keeps lo ≤ w ≤ hi"),
        "opsm": TieRule("log", "drops A < 0 with mean(−log w) > δ"),
        "kl_reject": TieRule("log", "keeps log a ≤ k1 ≤ log b, k2, k3 ≤ τ"),
        "tis_clip": _TIS_CLIP,
        "tis_norm": TieRule("value", "min(w, c)/batch mean"),
        "gspo": _GSPO,
        "cispo": TieRule("value", "clamp(w, min=lo, max=hi)"),
        "sapo": TieRule("value", "w·sech²(τ(w − 1)/2)"),
        "vespo": _VESPO,
        "clip_cov": TieRule("ratio", "ppo_clip; drops max(⌊ρn⌋, 1) of lb < cov < ub, largest w"),
        "kl_cov": dataclasses.replace(_KL_COV, exported=True),
    },
)


def tie_rule(framework: str | None, estimator: str) -> TieRule:
    """The rule ``framework`` decides ``estimator``'s ties by (``None``: ours, ``OURS``).

    Raises ValueError naming the framework and the estimator when the framework is unknown
    or has no such estimator."""
    if framework is None:
        if estimator not in OURS:
            raise ValueError(f"unknown estimator {estimator!r}")
        return OURS[estimator]
    if framework not in TIE_RULES:
        known = ", ".join(FRAMEWORKS)
        raise ValueError(f"ties: unknown framework {framework!r}; expected one of {known}")
    rule = TIE_RULES[framework].get(estimator)
    if rule is None:
        raise ValueError(f"ties: {framework} has no estimator {estimator!r}, so no tie rule")
    return rule


def _cell(rule: TieRule | None, ours: bool = False) -> str:
    if rule is None:
        return "–"
    tie = {"half": "w/2 at the tie", "first": "equal cov: first by position"}.get(
        rule.at_tie, "tie kept"
    )
    cell = f"{rule.test}; {tie}" if rule.space != "value" else f"{rule.test}; no tie"
    if rule.clamp == "value":
        cell += "; w of log w clamped to ±20"
    elif rule.clamp == "gradient":
        cell += "; ω = 0 where |log w| > 20"
    return cell if rule.exported or ours else f"{cell} (not exported)"


def tie_table() -> str:
    """The docs table of tie rules: one row per estimator that some framework has, one column
    for ours and one for each framework (Markdown, as ``docs/rl.md`` holds it)."""
    names = [n for n in OURS if any(n in TIE_RULES[f] for f in FRAMEWORKS)]
    lines = [
        "| estimator | ours | " + " | ".join(FRAMEWORKS) + " |",
        "|---" * (2 + len(FRAMEWORKS)) + "|",
    ]
    for name in names:
        cells = [_cell(OURS[name], ours=True), *(_cell(TIE_RULES[f].get(name)) for f in FRAMEWORKS)]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
