"""The rules of the policy-gradient correction weights, written once for any array namespace.

``weights(xp, name, ...)`` computes the multiplier ω of every estimator (the rules are listed in
``kernels.rl.estimators``, whose ``correction_weights`` is ``weights`` on ``jax.numpy`` behind a
stop-gradient) with ``xp`` either ``jax.numpy`` or ``numpy``; ``numpy_weights`` is the NumPy
form, so that reading a log and weighing its tokens loads no JAX. ``check_params`` validates an
estimator's name and parameters. This module imports no JAX.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
from jaxtyping import Float

from kernel_contracts.contracts.checks import param_range, valid_band
from kernel_contracts.contracts.fields import ESTIMATOR_PARAMS, ESTIMATORS
from kernel_contracts.contracts.rejection import Criterion, RejectionError, parse_rejection
from kernel_contracts.kernels.rl.cov import clip_cov_weights, cov_scores, kl_cov_weights
from kernel_contracts.kernels.rl.gspo import LOG_CLAMP, gspo_weights
from kernel_contracts.kernels.rl.sapo import sapo_gate_weight
from kernel_contracts.kernels.rl.ties import LOG_RATIO_CLAMP, tie_rule
from kernel_contracts.kernels.rl.vespo import vespo_weights

__all__ = ["ESTIMATOR_NAMES", "PARAMS", "check_params", "numpy_weights", "weights"]

# an array of either namespace (jaxtyping's ArrayLike would import JAX)
ArrayLike = Any

# the estimator names, in the order of the DSL (``contracts.fields.ESTIMATORS``)
ESTIMATOR_NAMES: tuple[str, ...] = ESTIMATORS

# estimator -> the parameter keys it requires
PARAMS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {name: ESTIMATOR_PARAMS.get(name, ()) for name in ESTIMATORS}
)

_NO_PARAMS: Mapping[str, float | tuple] = MappingProxyType({})


def _number(name: str, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"estimator {name!r}: {key} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"estimator {name!r}: {key} must be finite, got {value!r}")
    return value


# the list-valued parameters: key -> (the items, the rule they keep, the message if not)
_LISTS: Mapping[str, tuple[tuple[str, ...], Any, str]] = MappingProxyType(
    {
        "temperatures": (("tau_pos", "tau_neg"), lambda v: min(v) > 0, "must be > 0"),
        "gamma": (
            ("k_pos", "lambda_pos", "k_neg", "lambda_neg"),
            lambda v: min(v) > 0,
            "must be > 0",
        ),
        "band": (("lo", "hi"), lambda v: valid_band(*v), "needs 0 <= lo < 1 < hi"),
        "cov_band": (("lb", "ub"), lambda v: v[0] < v[1], "needs lb < ub"),
    }
)


def _numbers(name: str, key: str, value: object) -> tuple[float, ...]:
    """A list parameter (``_LISTS``): its length, each item a finite number, and its rule."""
    items, rule, statement = _LISTS[key]
    if not isinstance(value, tuple | list) or len(value) != len(items):
        shape = f"{'a pair ' if len(items) == 2 else ''}({', '.join(items)})"
        raise ValueError(f"estimator {name!r}: {key} must be {shape}, got {value!r}")
    got = tuple(_number(name, f"{key}[{i}]", v) for i, v in enumerate(value))
    if not rule(got):
        raise ValueError(f"estimator {name!r}: {key} {statement}, got {value!r}")
    return got


def check_params(name: str, params: Mapping[str, object]) -> dict[str, object]:
    """Validate an estimator's name and parameters; return them as plain floats and tuples.

    Raises ValueError naming the estimator and the key when the name is unknown, a required
    key is missing, an unknown key is given, or a value is out of its range.
    """
    if name not in PARAMS:
        known = ", ".join(ESTIMATOR_NAMES)
        raise ValueError(f"unknown estimator {name!r}; expected one of {known}")
    need = PARAMS[name]
    extra = sorted(set(params) - set(need))
    if extra:
        raise ValueError(f"estimator {name!r}: unexpected parameter(s) {', '.join(extra)}")
    missing = [k for k in need if k not in params]
    if missing:
        raise ValueError(f"estimator {name!r}: missing parameter(s) {', '.join(missing)}")
    out: dict[str, object] = {}
    if name == "kl_reject":
        try:
            parse_rejection(params["reject"], params["reject_threshold"])
        except RejectionError as err:
            raise ValueError(f"estimator {name!r}: {err}") from None
        return {"reject": params["reject"], "reject_threshold": str(params["reject_threshold"])}
    for key in need:
        value = params[key]
        if key in _LISTS:
            out[key] = _numbers(name, key, value)
            continue
        v = _number(name, key, value)
        allowed = param_range(name, key)
        if v not in allowed:
            raise ValueError(f"estimator {name!r}: {key} must be {allowed}, got {v!r}")
        out[key] = v
    return out


# the estimators whose framework clamps a sequence's sum of log w, not each token's
_SEQUENCE_CLAMPED = frozenset({"seq_is", "seq_tis", "seq_mask"})


def _sequence_log(xp, lr: Float[ArrayLike, "batch time"], clamp: str | None) -> ArrayLike:
    """Each row's sum of log w (padding holds 0), clamped to ±20 where the framework does."""
    log_seq = xp.sum(lr, axis=1, keepdims=True)
    if clamp == "value":
        log_seq = xp.clip(log_seq, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return log_seq


def _capped_exp(xp, log_value, cap: float) -> ArrayLike:
    """min(exp(log_value), cap) computed without forming exp of a large number."""
    if cap == 0.0:
        return xp.zeros_like(log_value)
    return xp.exp(xp.minimum(log_value, math.log(cap)))


def _saturating_exp(xp, log_value) -> ArrayLike:
    """exp, with the result capped at the dtype's largest finite number instead of inf."""
    return xp.minimum(xp.exp(log_value), xp.finfo(log_value.dtype).max)


def _advantages(xp, advantages, lr: ArrayLike) -> ArrayLike:
    adv = xp.asarray(advantages, lr.dtype)
    if adv.shape != lr.shape:
        raise ValueError(f"advantages shape {adv.shape} differs from {lr.shape}")
    return adv


def _binary_kl(xp, lq: ArrayLike, lp: ArrayLike) -> ArrayLike:
    """KL(Bernoulli(q) ‖ Bernoulli(p)) for q = e^lq, p = e^lp (lq, lp ≤ 0), never NaN.

    Each term a·log(a/b) is 0 where a = 0 (whatever b, 0 included) and +inf where a > 0 = b.
    1 − q and 1 − p are −expm1 of the logs, accurate where q or p rounds to 1."""
    q, nq, n_p = xp.exp(lq), -xp.expm1(lq), -xp.expm1(lp)
    head = xp.where(q > 0, q * (lq - lp), 0.0)  # lp = −inf: +inf
    tail = xp.where(nq > 0, nq * (xp.log(nq) - xp.log(n_p)), 0.0)  # 1 − p = 0: +inf
    return head + tail


def _dual_clip_autograd(xp, w: ArrayLike, adv: ArrayLike, eps: float, cap: float) -> ArrayLike:
    """ω of the dual-clip loss of verl, NeMo-RL and SkyRL under PyTorch's autograd: the
    gradient of min(max(−A·w, −A·clip(w, 1 − ε, 1 + ε)), −A·c) (the min for A < 0 only) with
    respect to log π, over −A. ``clamp`` passes the gradient on its closed range; ``maximum``
    and ``minimum`` give each of two equal sides half of its own gradient. Where A = 0 the
    gradient is 0 whatever ω, and ω = w."""
    lo, hi = 1.0 - eps, 1.0 + eps
    inside = ((w >= lo) & (w <= hi)).astype(w.dtype)  # the clipped side's share of w
    l1, l2, l3 = -adv * w, -adv * xp.clip(w, lo, hi), -adv * cap
    share = xp.where(l1 > l2, 1.0, xp.where(l1 < l2, inside, 0.5 * (1.0 + inside)))
    top = xp.maximum(l1, l2)
    dual = xp.where(top < l3, share, xp.where(top > l3, 0.0, 0.5 * share))
    share = xp.where(adv < 0, dual, share)
    return xp.where(adv == 0, w, share * w)


def _dppo_dropped(
    xp,
    name: str,
    tau: float,
    lr: Float[ArrayLike, "batch time"],
    advantages: Float[ArrayLike, "batch time"],
    logp_inf: Float[ArrayLike, "batch time"] | None,
) -> ArrayLike:
    """Where DPPO's binary TV or KL mask drops a token: the divergence of the sampled token's
    Bernoulli laws exceeds τ and the advantage pushes π(y) further from π'(y)."""
    if logp_inf is None:
        raise ValueError(f"estimator {name!r} needs logp_inf (log π_inf of the sampled tokens)")
    adv = _advantages(xp, advantages, lr)
    lq = xp.asarray(logp_inf, lr.dtype)
    if lq.shape != lr.shape:
        raise ValueError(f"logp_inf shape {lq.shape} differs from {lr.shape}")
    lq = xp.minimum(lq, 0.0)
    lp = xp.minimum(lq + lr, 0.0)
    q, pr = xp.exp(lq), xp.exp(lp)
    up, down = pr > q, pr < q
    if name == "dppo_tv":
        return ((adv > 0) & (pr - q > tau)) | ((adv < 0) & (q - pr > tau))
    far = _binary_kl(xp, lq, lp) > tau
    return ((adv > 0) & up & far) | ((adv < 0) & down & far)


def _kept(xp, crit: Criterion, lr: Float[ArrayLike, "batch time"], valid: ArrayLike) -> ArrayLike:
    """Where one rejection criterion keeps the token (padding holds log w = 0: k = 0)."""
    k = {1: -lr, 2: 0.5 * lr * lr, 3: xp.expm1(lr) - lr}[crit.k]
    if crit.level == "token":
        stat = k
    elif crit.level == "seq_max":
        stat = xp.max(xp.where(valid, k, 0.0), axis=1, keepdims=True)
    else:
        stat = xp.sum(xp.where(valid, k, 0.0), axis=1, keepdims=True)
        if crit.level == "seq_mean":
            n = xp.sum(valid, axis=1, keepdims=True)
            stat = stat / xp.maximum(n, 1).astype(lr.dtype)
    if crit.k == 1:
        return (stat >= math.log(crit.a)) & (stat <= math.log(crit.b))
    return stat <= crit.tau


def weights(
    xp,
    name: str,
    log_ratio: Float[ArrayLike, "batch time"],
    mask: Float[ArrayLike, "batch time"],
    advantages: Float[ArrayLike, "batch time"],
    *,
    params: Mapping[str, object] = _NO_PARAMS,  # checked by check_params
    token_tv: Float[ArrayLike, "batch time"] | None = None,
    token_kl: Float[ArrayLike, "batch time"] | None = None,
    logp_inf: Float[ArrayLike, "batch time"] | None = None,
    ties: str | None = None,
) -> Float[ArrayLike, "batch time"]:
    """The per-token multiplier ω (stop-gradient) of ∇log π_train(y_t) · A_t for ``name``.

    ``log_ratio`` is log π_train(y_t) − log π_inf(y_t) at the sampled tokens; ``mask`` is 1 on
    real tokens and 0 on padding (ω = 0 there). ``advantages`` matters to ``ppo_clip``,
    ``dual_clip``, ``dppo_*``, ``opsm``, ``gspo``, ``sapo``, ``vespo``, ``clip_cov`` and
    ``kl_cov``;
    ``token_tv`` (``tv_mask``) and ``token_kl`` (``kl_mask``, KL(π_inf‖π_train)) are the
    full-vocabulary divergences at each position; ``logp_inf`` (``dppo_tv``, ``dppo_kl``) is
    log π_inf(y_t) at the sampled tokens (``clip_cov`` and ``kl_cov`` read log π_train =
    ``logp_inf`` + ``log_ratio`` for their covariance). ``ties`` picks whose rule decides a
    token on a threshold: ``None`` ours, or a framework of ``kernels.rl.ties.FRAMEWORKS``
    (ValueError for an estimator that framework does not have). ``name``, ``params`` and
    ``ties`` are static (Python values). ``xp`` is the array namespace that computes:
    ``jax.numpy`` (the arrays may then be traced, so the function works under ``jax.jit``) or
    ``numpy``.
    """
    p = check_params(name, params)
    rule = tie_rule(ties, name)
    space = rule.space
    log_ratio = xp.asarray(log_ratio)
    if not xp.issubdtype(log_ratio.dtype, xp.floating) or log_ratio.dtype.itemsize < 4:
        log_ratio = log_ratio.astype(xp.float32)  # 16-bit log-probs get float32 weights
    dtype = log_ratio.dtype
    if log_ratio.ndim != 2:
        raise ValueError(f"log_ratio must have shape (batch, time), got {log_ratio.shape}")
    mask = xp.asarray(mask)
    if mask.shape != log_ratio.shape:
        raise ValueError(f"mask shape {mask.shape} differs from log_ratio shape {log_ratio.shape}")
    valid = mask > 0
    lr = raw = xp.where(valid, log_ratio, xp.zeros((), dtype))
    # the framework's clamp of log w (kernels.rl.ties.CLAMPS): a token's log w here, a
    # sequence's sum in the sequence rules below; the DPPO masks read the unclamped ``raw``
    if rule.clamp == "value" and name not in _SEQUENCE_CLAMPED:
        lr = xp.clip(raw, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    w = _saturating_exp(xp, lr)

    if name == "plain":
        omega = xp.ones_like(lr)
    elif name == "tis":
        omega = _capped_exp(xp, lr, p["cap"])
    elif name == "mis":
        keep = w <= p["cap"] if space == "ratio" else lr <= math.log(p["cap"])
        omega = xp.where(keep, w, 0.0)
    elif name in ("ppo_clip", "dual_clip"):
        adv = _advantages(xp, advantages, lr)
        eps = p["clip_epsilon"]
        clipped = ((adv > 0) & (w > 1.0 + eps)) | ((adv < 0) & (w < 1.0 - eps))
        if name == "dual_clip":
            clipped |= (adv < 0) & (w > p["cap"])
        omega = xp.where(clipped, 0.0, w)
        if space == "loss":
            omega = _dual_clip_autograd(xp, w, adv, eps, p["cap"])
    elif name in ("dppo_tv", "dppo_kl"):
        omega = xp.where(_dppo_dropped(xp, name, p["threshold"], raw, advantages, logp_inf), 0.0, w)
    elif name == "tis_mask":
        lo, hi = p["band"]
        if space == "k1":  # verl: token TIS with the token_k1 rejection "1/hi_1/lo"
            if lo == 0:
                raise ValueError(
                    f"estimator 'tis_mask' with ties={ties!r}: a band from 0 has no token_k1 "
                    "form (its upper threshold would be 1/0)"
                )
            keep = _kept(xp, Criterion("token", 1, 1 / hi, 1 / lo, None), lr, valid)
        else:
            keep = (w >= lo) & (w <= hi)
        omega = xp.where(keep, _capped_exp(xp, lr, p["cap"]), 0.0)
    elif name == "seq_mask":
        lo, hi = p["band"]
        log_seq = _sequence_log(xp, lr, rule.clamp)
        if space == "ratio":
            big_w = _saturating_exp(xp, log_seq)
            keep, kept = (big_w >= lo) & (big_w <= hi), big_w
        else:
            log_lo = math.log(lo) if lo > 0 else -math.inf
            keep = (log_seq >= log_lo) & (log_seq <= math.log(hi))
            kept = _capped_exp(xp, log_seq, hi)
        omega = xp.where(keep, xp.broadcast_to(kept, lr.shape), 0.0)
    elif name == "seq_outlier":
        lo, hi = p["band"]
        outside = valid & ((w < lo) | (w > hi))
        omega = xp.where(xp.any(outside, axis=1, keepdims=True), 0.0, w)
    elif name == "kl_reject":
        keep = xp.ones(lr.shape, bool)
        for crit in parse_rejection(p["reject"], p["reject_threshold"]):
            keep &= _kept(xp, crit, lr, valid)
        omega = xp.where(keep, w, 0.0)
    elif name == "opsm":
        adv = _advantages(xp, advantages, lr)
        n = xp.sum(valid, axis=1, keepdims=True)
        mean_k1 = -xp.sum(lr, axis=1, keepdims=True) / xp.maximum(n, 1).astype(dtype)
        omega = xp.where((adv < 0) & (mean_k1 > p["threshold"]), 0.0, w)
    elif name == "icepop":
        lo, hi = p["band"]
        omega = xp.where((w >= lo) & (w <= hi), w, 0.0)
    elif name in ("tis_clip", "cispo"):
        lo, hi = p["band"]
        omega = xp.maximum(_capped_exp(xp, lr, hi), lo)
    elif name == "tis_norm":
        capped = xp.where(valid, _capped_exp(xp, lr, p["cap"]), 0.0)
        mean = xp.sum(capped) / xp.maximum(xp.sum(valid), 1).astype(dtype)
        omega = xp.where(mean > 1e-8, capped / xp.maximum(mean, 1e-8), capped)
    elif name == "sapo":
        omega = sapo_gate_weight(xp, w, _advantages(xp, advantages, lr), *p["temperatures"])
    elif name == "vespo":
        omega = vespo_weights(xp, lr, valid, _advantages(xp, advantages, lr), p["gamma"])
    elif name in ("clip_cov", "kl_cov"):
        adv = xp.where(valid, _advantages(xp, advantages, lr), 0.0)
        if logp_inf is None:
            raise ValueError(f"estimator {name!r} needs logp_inf (log π_inf of the sampled tokens)")
        lq = xp.asarray(logp_inf, dtype)
        if lq.shape != lr.shape:
            raise ValueError(f"logp_inf shape {lq.shape} differs from {lr.shape}")
        cov = cov_scores(xp, xp.where(valid, lq, 0.0) + lr, adv, valid)
        if name == "kl_cov":
            omega = kl_cov_weights(xp, lr, w, adv, cov, valid, p["cov_fraction"], p["kl_coef"])
        else:
            eps = p["clip_epsilon"]
            clipped = ((adv > 0) & (w > 1.0 + eps)) | ((adv < 0) & (w < 1.0 - eps))
            ppo = xp.where(clipped, 0.0, w)
            if space == "loss":  # max of the two losses: a tie splits the gradient
                ppo = _dual_clip_autograd(xp, w, adv, eps, math.inf)
                clipped = -adv * xp.clip(w, 1.0 - eps, 1.0 + eps) > -adv * w
            omega = clip_cov_weights(
                xp, w, ppo, ~clipped, cov, valid, p["cov_fraction"], p["cov_band"]
            )
    elif name == "gspo":
        adv = _advantages(xp, advantages, lr)
        omega = gspo_weights(xp, lr, valid, adv, p["clip_epsilon"], LOG_CLAMP.get(ties or ""))
    elif name in ("seq_is", "seq_tis"):
        log_seq = _sequence_log(xp, lr, rule.clamp)
        if name == "seq_is":
            omega = xp.broadcast_to(_saturating_exp(xp, log_seq), lr.shape)
        else:
            omega = xp.broadcast_to(_capped_exp(xp, log_seq, p["cap"]), lr.shape)
    elif name == "geo_mask":
        lo, hi = p["band"]
        n = xp.sum(valid, axis=1, keepdims=True)
        log_geo = xp.sum(lr, axis=1, keepdims=True) / xp.maximum(n, 1).astype(dtype)
        if space == "ratio":
            geo = xp.exp(log_geo)
            keep = (geo >= lo) & (geo <= hi)
        else:
            log_lo = math.log(lo) if lo > 0 else -math.inf
            keep = (log_geo >= log_lo) & (log_geo <= math.log(hi))
        omega = xp.where(keep, w, 0.0)
    else:  # tv_mask, kl_mask
        div = token_tv if name == "tv_mask" else token_kl
        if div is None:
            arg = "token_tv" if name == "tv_mask" else "token_kl"
            raise ValueError(f"estimator {name!r} needs {arg}")
        div = xp.asarray(div, dtype)
        if div.shape != lr.shape:
            raise ValueError(f"divergence shape {div.shape} differs from {lr.shape}")
        omega = xp.where(div > p["threshold"], 0.0, w)

    if rule.clamp == "gradient":  # the loss's ratio is exp of the clamped log w
        omega = xp.where(xp.abs(raw) > LOG_RATIO_CLAMP, 0.0, omega)
    return xp.where(valid, omega, 0.0).astype(dtype)


def numpy_weights(
    name: str,
    log_ratio: Float[ArrayLike, "batch time"],
    mask: Float[ArrayLike, "batch time"],
    advantages: Float[ArrayLike, "batch time"],
    **kw,
) -> Float[np.ndarray, "batch time"]:
    """``weights`` computed by NumPy: the rules of ``kernels.rl.correction_weights`` without
    JAX, for readers of logs that must not load it (``evidence.weights``). Overflow to the
    saturated values is expected there, so NumPy's floating-point warnings are silenced."""
    with np.errstate(all="ignore"):
        return np.asarray(weights(np, name, log_ratio, mask, advantages, **kw))
