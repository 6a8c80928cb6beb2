"""The weight metrics RL frameworks log, each by its framework's own definition.

A framework logs numbers about the weights it applies under names of its own, and a user
compares our report with that dashboard. So each name here is computed as the framework's
code computes it, on the weights of the setting ``verify export`` writes for the estimator
(``docs/pipeline.md``), from the same tokens; an estimator the framework has no setting for
gets none of its names. Read at verl 1dda039b (``verl/trainer/ppo/rollout_corr_helper.py``),
NeMo-RL 7ea279ab (``nemo_rl/algorithms/loss/loss_functions.py``), TRL f2cd5771
(``trl/trainer/grpo_trainer.py``) and SkyRL a9564572
(``skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py``). With w = π/π' per
token and W = Π w per sequence, all in float32 as the frameworks hold log-probs:

- verl (``rollout_corr/`` prefix). Its importance-sampling part (``rollout_is``) weighs
  ρ = exp(log w clamped to ±20), or W likewise from the clamped sum, and truncates (a number
  threshold) or zeroes outside a band (IcePop, ``"lo_hi"``). ``rollout_is_mean``: the token
  mean of those weights; ``rollout_is_max``: their maximum at token level, but at sequence
  level the raw maximum of W (clamped at e^20), before truncation or masking;
  ``rollout_is_eff_sample_size``: 1 / mean((ρ / (mean ρ + 1e-8))²) over tokens;
  ``rollout_is_oob_ratio`` (IcePop): the share of tokens whose raw weight lies outside the
  band. Its rejection part (``rollout_rs``: ``tis_mask``'s ``token_k1``, ``kl_reject``'s
  criteria) is applied apart: ``rollout_rs_masked_fraction`` and
  ``rollout_rs_seq_masked_fraction`` are the shares of tokens and of sequences it drops, and
  the ``rollout_is_*`` numbers are those of the weights before it. ``kl_reject`` keeps w
  itself, so its importance part is token level with a threshold that truncates nothing.
  ``tis_norm`` (``rollout_is_batch_normalize``) logs those of ``tis``: before the division.
- NeMo-RL ``is_oob_ratio``: under ``tis`` (``tis``) the share of tokens with w above the cap
  (the clipped ones), and with ``truncated_importance_sampling_ratio_min`` (``tis_clip``, from
  0.7) those above hi or below lo; under ``icepop`` (``mis``, ``icepop``) the share of tokens
  outside the band; under ``seq-mask-tis`` (``geo_mask``) the share of sequences whose
  geometric mean exp(mean log w) lies outside it.
- TRL ``sampling/importance_sampling_ratio/min``, ``/mean``, ``/max``: of its corrected
  ratio (truncated, clamped to [lo, hi] for ``tis_clip``, or masked), over tokens in the
  token modes and over sequences, one W each, in the sequence modes. For ``opsm`` (token
  truncation at [0, none]) the ratio is w itself: TRL logs it before the off-policy mask, the
  one part that reads the advantage.
- SkyRL: ``tis_token_clip_high_ratio``, the share of tokens whose ratio (clamped to e^±20)
  exceeds the TIS cap among the tokens its token mask (``mis``, ``icepop``, ``tis_mask``) or
  outlier mask (``seq_outlier``) leaves, 0 where it leaves none; ``tis_seq_clip_high_ratio``,
  the share of sequences whose W exceeds the cap; ``token_mask_ratio``, the share of tokens
  outside the token mask's band; ``product_sequence_mask_masked_ratio``, the share of
  sequences whose W lies outside the band.

Every ratio is exp in float32 correctly rounded, the nearest to torch's float32 exp (numpy's
own float32 exp is an ulp off on many inputs, which moves a token sitting on a threshold
across it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["FRAMEWORK_NAMES", "chunk_parts", "finish", "merge"]

RC = "rollout_corr/"
TRL_RATIO = "sampling/importance_sampling_ratio/"
FRAMEWORK_NAMES = (
    RC + "rollout_is_mean",
    RC + "rollout_is_max",
    RC + "rollout_is_eff_sample_size",
    RC + "rollout_is_oob_ratio",
    RC + "rollout_rs_masked_fraction",
    RC + "rollout_rs_seq_masked_fraction",
    "is_oob_ratio",
    TRL_RATIO + "min",
    TRL_RATIO + "mean",
    TRL_RATIO + "max",
    "tis_token_clip_high_ratio",
    "tis_seq_clip_high_ratio",
    "token_mask_ratio",
    "product_sequence_mask_masked_ratio",
)
SAFETY_BOUND = 20.0  # verl and SkyRL clamp log w (log W) to ±20 before exponentiating
TOP = math.exp(SAFETY_BOUND)  # a cap or band end at or above it has no verl or SkyRL setting
ICEPOP_FLOOR = 1e-9  # the lower band end verl is given for a band from 0
NO_TRUNCATION = 5e8  # a verl threshold above every clamped weight

Part = tuple[str, tuple[float, ...]]  # kind ("share", "mean", "max", "min", "ess"), numbers
Weigh = Callable[[str, Mapping[str, object], str | None, np.ndarray], np.ndarray]


def _band(p: Mapping) -> tuple[float, float]:
    lo, hi = p["band"]
    return float(lo), float(hi)


def _top(name: str, p: Mapping) -> float:
    if "band" in p:
        return _band(p)[1] if name != "tis_mask" else min(float(p["cap"]), _band(p)[1])
    return float(p.get("cap", 0.0))


class _Grid:
    """One chunk: log w per (row, column) in float32, which cells are tokens, and the rows
    without tokens that a framework would count (``empty``)."""

    def __init__(self, lr: np.ndarray, valid: np.ndarray, empty: int):
        self.lr = np.where(valid, lr, 0.0).astype(np.float32)
        self.valid, self.empty = valid, empty
        self.rows = valid.any(axis=1)
        self.n = int(valid.sum())
        self.log_seq = self.lr.sum(axis=1, dtype=np.float32)[self.rows]  # rows with tokens

    def token_share(self, hit: np.ndarray) -> Part:
        return "share", (float(np.count_nonzero(hit & self.valid)), float(self.n))

    def seq_share(self, hit: np.ndarray) -> Part:
        """The share of rows hit, ``hit`` given per row with tokens; an empty row is never hit
        (it has no token to drop) but counts in the total."""
        return "share", (float(np.count_nonzero(hit)), float(hit.size + self.empty))

    def clamped_seq(self) -> np.ndarray:
        return _exp32(np.clip(self.log_seq, -SAFETY_BOUND, SAFETY_BOUND))

    def clamped_tokens(self) -> np.ndarray:
        return _exp32(np.clip(self.lr, -SAFETY_BOUND, SAFETY_BOUND))


def _exp32(x: np.ndarray) -> np.ndarray:
    """exp in float32, correctly rounded (through float64). torch's float32 exp gives the same
    float on nearly every input; numpy's is an ulp off on many (exp(float32(log 2) + 1 ulp) is
    2 in numpy, the next float above 2 in torch and here)."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float64)).astype(np.float32)


def _inside(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (x >= np.float32(lo)) & (x <= np.float32(hi))


def _verl_setting(name: str, p: Mapping):
    """(level, upper, lower or None, rejection (name, params) or None), or None."""
    if name != "kl_reject" and not 0 < _top(name, p) < TOP:  # verl wants a positive threshold
        return None
    if name in ("tis", "tis_norm", "seq_tis"):  # tis_norm: verl logs before normalising
        return ("sequence" if name == "seq_tis" else "token"), float(p["cap"]), None, None
    if name == "mis":
        return "token", float(p["cap"]), ICEPOP_FLOOR, None
    if name in ("icepop", "seq_mask"):
        lo, hi = _band(p)
        level = "token" if name == "icepop" else "sequence"
        return level, hi, lo if lo > 0 else ICEPOP_FLOOR, None
    if name == "tis_mask" and _band(p)[0] > 0:
        # a kept token's weight min(w, 1) > 0: the weights say which tokens token_k1 keeps
        return "token", float(p["cap"]), None, ("tis_mask", {**p, "cap": 1.0}, "verl")
    if name == "kl_reject":
        return "token", NO_TRUNCATION, None, ("kl_reject", dict(p), None)
    return None


def _verl(name: str, p: Mapping, g: _Grid, weigh: Weigh) -> dict[str, Part]:
    setting = _verl_setting(name, p)
    if setting is None:
        return {}
    level, upper, lower, rejection = setting
    if level == "token":
        raw = g.clamped_tokens()
    else:
        raw = np.zeros(g.lr.shape, np.float32)
        raw[g.rows] = g.clamped_seq()[:, None]
    if lower is None:
        rho = np.minimum(raw, np.float32(upper))
    else:
        rho = np.where(_inside(raw, lower, upper), raw, np.float32(0.0))
    kept = rho[g.valid].astype(np.float64)
    out = {
        RC + "rollout_is_mean": ("mean", (float(kept.sum()), float(g.n))),
        RC + "rollout_is_eff_sample_size": (
            "ess",
            (float(kept.sum()), float(np.dot(kept, kept)), float(g.n)),
        ),
    }
    if level == "token":
        out[RC + "rollout_is_max"] = ("max", (float(kept.max()),))
    else:  # the raw maximum of W, an empty row's W = 1 included
        top = float(np.max(g.log_seq)) if g.empty == 0 else max(0.0, float(np.max(g.log_seq)))
        out[RC + "rollout_is_max"] = ("max", (math.exp(min(top, SAFETY_BOUND)),))
    if lower is not None:
        out[RC + "rollout_is_oob_ratio"] = g.token_share(~_inside(raw, lower, upper))
    if rejection is not None:
        # verl judges its criteria on log w clamped to ±20, where every w > 0
        safe = np.clip(g.lr, -SAFETY_BOUND, SAFETY_BOUND)
        dropped = g.valid & ~(weigh(*rejection, safe) > 0)
        out[RC + "rollout_rs_masked_fraction"] = g.token_share(dropped)
        out[RC + "rollout_rs_seq_masked_fraction"] = g.seq_share(dropped.any(axis=1)[g.rows])
    return out


def _nemo(name: str, p: Mapping, g: _Grid) -> dict[str, Part]:
    w = np.nan_to_num(_exp32(g.lr), nan=0.0, posinf=0.0, neginf=0.0)
    if name == "tis":
        return {"is_oob_ratio": g.token_share(w > np.float32(p["cap"]))}
    if name == "tis_clip":  # the tis type with a floor: clamped from either side
        lo, hi = _band(p)
        return {"is_oob_ratio": g.token_share((w > np.float32(hi)) | (w < np.float32(lo)))}
    if name in ("mis", "icepop"):
        lo, hi = (0.0, float(p["cap"])) if name == "mis" else _band(p)
        return {"is_oob_ratio": g.token_share(~_inside(w, lo, hi))}
    if name == "geo_mask":
        lo, hi = _band(p)
        counts = g.valid.sum(axis=1)[g.rows].astype(np.float32)
        geo = _exp32(g.log_seq / counts)
        out_one = not (lo <= 1.0 <= hi)  # an empty row's geometric mean is exp(0) = 1
        hit = np.append(~_inside(geo, lo, hi), [out_one] * g.empty)
        return {"is_oob_ratio": ("share", (float(np.count_nonzero(hit)), float(hit.size)))}
    return {}


def _trl(name: str, p: Mapping, g: _Grid) -> dict[str, Part]:
    if name in ("tis", "mis", "icepop", "tis_clip", "opsm"):  # opsm: w, clamped at 0 only
        ratio = _exp32(g.lr)[g.valid]
    elif name in ("seq_tis", "seq_is", "seq_mask"):
        ratio = np.append(_exp32(g.log_seq), np.ones(g.empty, np.float32))
    else:
        return {}
    if name in ("tis", "seq_tis"):
        ratio = np.minimum(ratio, np.float32(p["cap"]))
    elif name == "tis_clip":
        ratio = np.clip(ratio, np.float32(_band(p)[0]), np.float32(_band(p)[1]))
    elif name in ("mis", "icepop", "seq_mask"):
        lo, hi = (-math.inf, float(p["cap"])) if name == "mis" else _band(p)
        ratio = np.where(_inside(ratio, lo, hi), ratio, np.float32(0.0))
    ratio = ratio.astype(np.float64)
    return {
        TRL_RATIO + "min": ("min", (float(ratio.min()),)),
        TRL_RATIO + "mean": ("mean", (float(ratio.sum()), float(ratio.size))),
        TRL_RATIO + "max": ("max", (float(ratio.max()),)),
    }


def _skyrl(name: str, p: Mapping, g: _Grid) -> dict[str, Part]:
    if _top(name, p) >= TOP or name not in (
        "tis",
        "mis",
        "icepop",
        "tis_mask",
        "seq_tis",
        "seq_mask",
        "seq_outlier",
    ):
        return {}
    if name in ("seq_tis", "seq_mask"):
        cap = float(p["cap"]) if name == "seq_tis" else _band(p)[1]
        big_w = np.append(g.clamped_seq(), np.ones(g.empty, np.float32))
        out = {
            "tis_seq_clip_high_ratio": (
                "share",
                (float(np.count_nonzero(big_w > np.float32(cap))), float(big_w.size)),
            )
        }
        if name == "seq_mask":
            hit = ~_inside(big_w, *_band(p))
            out["product_sequence_mask_masked_ratio"] = (
                "share",
                (float(np.count_nonzero(hit)), float(hit.size)),
            )
        return out
    ratio = g.clamped_tokens()
    cap = float(p["cap"]) if name in ("tis", "mis", "tis_mask") else _band(p)[1]
    out, left = {}, g.valid  # the tokens the token or outlier mask leaves to the TIS metric
    if name == "seq_outlier":
        outlier = (g.valid & ~_inside(ratio, *_band(p))).any(axis=1, keepdims=True)
        left = g.valid & ~outlier
    elif name != "tis":
        lo, hi = (0.0, cap) if name == "mis" else _band(p)
        out["token_mask_ratio"] = g.token_share(~_inside(ratio, lo, hi))
        left = g.valid & _inside(ratio, lo, hi)
    hits = np.count_nonzero(left & (ratio > np.float32(cap)))
    out["tis_token_clip_high_ratio"] = ("share", (float(hits), float(np.count_nonzero(left))))
    return out


def chunk_parts(
    name: str, params: Mapping, lr: np.ndarray, valid: np.ndarray, empty: int, weigh: Weigh
) -> dict[str, Part]:
    """The frameworks' numbers for estimator ``name`` on one chunk of rows, as mergeable parts:
    ``lr`` holds log w per (row, column), ``valid`` marks the tokens, ``empty`` counts the
    sequences without tokens to add (give them with one chunk only), and ``weigh(name, params,
    ties, log_w)`` gives ``correction_weights`` on the chunk's cells for log w ``log_w`` (for
    verl's rejection masks)."""
    g = _Grid(lr, valid, empty)
    if g.n == 0:
        return {}
    return {
        **_verl(name, params, g, weigh),
        **_nemo(name, params, g),
        **_trl(name, params, g),
        **_skyrl(name, params, g),
    }


def merge(a: dict[str, Part], b: dict[str, Part]) -> dict[str, Part]:
    """Two chunks' parts as one."""
    out = dict(a)
    for key, (kind, nums) in b.items():
        if key not in out:
            out[key] = (kind, nums)
        elif kind in ("max", "min"):
            pick = max if kind == "max" else min
            out[key] = (kind, (pick(out[key][1][0], nums[0]),))
        else:
            out[key] = (kind, tuple(x + y for x, y in zip(out[key][1], nums, strict=True)))
    return out


def finish(parts: Mapping[str, Part]) -> dict[str, float]:
    """The numbers, in ``FRAMEWORK_NAMES`` order; a number that is not finite is left out."""
    out: dict[str, float] = {}
    for key in FRAMEWORK_NAMES:
        if key not in parts:
            continue
        kind, nums = parts[key]
        if kind == "share":  # of no token: 0, as SkyRL's clamp(min=1) of the count gives
            value = nums[0] / nums[1] if nums[1] > 0 else 0.0
        elif kind == "mean":
            value = nums[0] / nums[1] if nums[1] > 0 else math.nan
        elif kind == "ess":  # verl: 1 / mean((ρ / (mean ρ + 1e-8))²)
            s1, s2, n = nums
            value = (s1 / n + 1e-8) ** 2 * n / s2 if s2 > 0 else math.nan
        else:
            value = nums[0]
        if math.isfinite(value):
            out[key] = value
    return out
