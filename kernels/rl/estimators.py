"""Off-policy correction weights for policy-gradient estimators.

Rollouts are sampled from the inference kernel's policy π' and the learner differentiates the
training kernel's policy π. With the per-token ratio w_t = π(y_t)/π'(y_t), each estimator gives
a multiplier ω_t, and the policy-gradient estimate is Σ_t ω_t · ∇log π(y_t) · A_t. The rules,
by name (``ESTIMATOR_NAMES``):

- ``plain``: ω = 1.
- ``tis`` (``cap`` c ≥ 0): ω = min(w, c); c = 0 gives ω = 0 on every token.
- ``mis`` (``cap`` c > 1): ω = w · 1[w ≤ c].
- ``ppo_clip`` (``clip_epsilon`` ε in (0, 1)): the gradient of PPO's clipped surrogate with the
  old policy π': ω = w unless the token is clipped (A > 0 and w > 1 + ε, or A < 0 and
  w < 1 − ε), then ω = 0.
- ``icepop`` (``band`` (lo, hi), 0 ≤ lo < 1 < hi): ω = w · 1[lo ≤ w ≤ hi].
- ``seq_is``: ω = W = Π_t w_t over the sequence's tokens, on every token of the sequence.
- ``seq_tis`` (``cap`` c ≥ 0): ω = min(W, c) on every token.
- ``geo_mask`` (``band`` (lo, hi)): a sequence whose geometric-mean ratio W^{1/n} lies outside
  [lo, hi] gets ω = 0; inside, ω = w per token.
- ``tv_mask`` (``threshold`` τ in (0, 1)): ω = 0 where TV(π(·|ctx), π'(·|ctx)) > τ, else w.
- ``kl_mask`` (``threshold`` τ > 0): ω = 0 where KL(π'‖π) at the position > τ, else w.
- ``dppo_tv`` (``threshold`` τ in (0, 1)): sign-aware, on the sampled token only (DPPO's
  binary TV): ω = 0 where A > 0 and π(y) − π'(y) > τ, or A < 0 and π'(y) − π(y) > τ; else w.
  ``tv_mask`` drops on the full-vocabulary distance whatever the advantage.
- ``dppo_kl`` (``threshold`` τ > 0): ω = 0 where the binary KL
  π'(y)·log(π'(y)/π(y)) + (1 − π'(y))·log((1 − π'(y))/(1 − π(y))) exceeds τ and the advantage
  pushes π(y) further from π'(y) (A > 0 with π(y) > π'(y), or A < 0 with π(y) < π'(y)); else w.
  Each term follows 0·log(0/x) = 0 (x = 0 included) and a·log(a/0) = +∞ for a > 0, so
  π'(y) = 1 gives −log π(y), π(y) = 1 > π'(y) gives +∞, and no input in [0, 1] gives NaN.
- ``dual_clip`` (``clip_epsilon`` ε, ``cap`` c > 1): ``ppo_clip``, and also ω = 0 where A < 0
  and w > c (the dual-clip surrogate is the constant c·A there).
- ``seq_mask`` (``band`` (lo, hi)): ω = W on every token of a sequence whose W lies in
  [lo, hi], 0 on the others.
- ``seq_outlier`` (``band`` (lo, hi)): a sequence with one token whose w lies outside [lo, hi]
  gets ω = 0; inside, ω = w per token.
- ``tis_mask`` (``cap`` c ≥ 0, ``band`` (lo, hi)): ω = min(w, c) where lo ≤ w ≤ hi, else 0.
- ``kl_reject`` (``reject``, ``reject_threshold``: verl's rejection criteria and thresholds,
  ``contracts.rejection``): ω = w where every criterion keeps the token (k1 = −log w inside a
  band, k2 = (log w)²/2 or k3 = w − 1 − log w at most τ, judged per token or by a sequence's
  sum, mean or maximum), else 0.
- ``opsm`` (``threshold`` δ > 0): a sequence with A < 0 whose mean of log(π'/π) over its
  tokens exceeds δ gets ω = 0; otherwise ω = w per token (the advantage is read per token, so
  a sequence-level advantage is given on each of its tokens).
- ``tis_clip`` (``band`` (lo, hi), 0 ≤ lo < 1 < hi): ω = clip(w, lo, hi), truncated IS with a
  floor (TRL's ``token_truncate`` with ``vllm_importance_sampling_clip_min``, NeMo-RL's ``tis``
  with ``truncated_importance_sampling_ratio_min``); lo = 0 is ``tis`` at cap hi.
- ``tis_norm`` (``cap`` c > 1): ω = min(w, c)/m, m the mean of min(w, c) over every real token
  of the batch given (verl's token-level ``rollout_is`` with ``rollout_is_batch_normalize``);
  where m ≤ 1e−8 the weights are left unnormalised, as verl does.
- ``sapo`` (``temperatures`` (τ_pos, τ_neg), each > 0): ω = w·sech²(τ(w − 1)/2), τ = τ_pos
  where A > 0 and τ_neg where A ≤ 0: the gradient of SAPO's soft gate (4/τ)·σ(τ(r − 1)) with
  the rollout as the old policy (``kernels.rl.sapo``). verl and SkyRL compute r from the
  log-ratio clamped to ±20, whose gradient is 0 beyond: under their rules (``ties=``) a token
  with |log w| > 20 gets ω = 0.

Ties. ``ties=None`` decides a token on a threshold by the rule above (``kernels.rl.ties.OURS``);
``ties="verl"`` (or ``"trl"``, ``"nemo-rl"``, ``"skyrl"``) by that framework's code
(``kernels.rl.ties.TIE_RULES``): the statistic it compares (the rounded ratio, the log-ratio,
or −log w against log(1/hi) for verl's ``tis_mask``), and for the dual-clip losses the gradient
PyTorch gives at −A·w = −A·c (w/2). An estimator the framework does not have is refused.

Products over a sequence are sums of log-ratios; a weight is exponentiated only after capping
its logarithm, so long sequences neither overflow nor produce NaN. ``seq_is`` has no cap: its
weight saturates at the largest finite number of the dtype. Padding (mask 0) gets ω = 0 and its
log-ratio is ignored, whatever it holds.

References:
    Espeholt et al., "IMPALA" (2018) — truncated importance sampling.
    Schulman et al., "Proximal Policy Optimization Algorithms" (2017) — the clipped surrogate.
    Ye et al., "Mastering Complex Control in MOBA Games with Deep RL" (2019) — dual clip.
    DeepSeek-AI, "DeepSeek-V3.2" (2025) — the off-policy sequence mask (``opsm``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from types import MappingProxyType

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.contracts.checks import param_range, valid_band
from kernel_contracts.contracts.fields import ESTIMATOR_PARAMS, ESTIMATORS
from kernel_contracts.contracts.rejection import Criterion, RejectionError, parse_rejection
from kernel_contracts.kernels.rl.sapo import sapo_gate_weight
from kernel_contracts.kernels.rl.ties import tie_rule

__all__ = ["ESTIMATOR_NAMES", "PARAMS", "check_params", "correction_weights"]

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
        if key == "temperatures":
            if not isinstance(value, tuple | list) or len(value) != 2:
                raise ValueError(
                    f"estimator {name!r}: temperatures must be a pair (tau_pos, tau_neg), "
                    f"got {value!r}"
                )
            pair = tuple(_number(name, f"temperatures[{i}]", v) for i, v in enumerate(value))
            if min(pair) <= 0:
                raise ValueError(f"estimator {name!r}: temperatures must be > 0, got {value!r}")
            out[key] = pair
            continue
        if key == "band":
            if not isinstance(value, tuple | list) or len(value) != 2:
                raise ValueError(f"estimator {name!r}: band must be a pair (lo, hi), got {value!r}")
            lo, hi = _number(name, "band[0]", value[0]), _number(name, "band[1]", value[1])
            if not valid_band(lo, hi):
                raise ValueError(f"estimator {name!r}: band needs 0 <= lo < 1 < hi, got {value!r}")
            out[key] = (lo, hi)
            continue
        v = _number(name, key, value)
        allowed = param_range(name, key)
        if v not in allowed:
            raise ValueError(f"estimator {name!r}: {key} must be {allowed}, got {v!r}")
        out[key] = v
    return out


def _capped_exp(log_value: Array, cap: float) -> Array:
    """min(exp(log_value), cap) computed without forming exp of a large number."""
    if cap == 0.0:
        return jnp.zeros_like(log_value)
    return jnp.exp(jnp.minimum(log_value, math.log(cap)))


def _saturating_exp(log_value: Array) -> Array:
    """exp, with the result capped at the dtype's largest finite number instead of inf."""
    return jnp.minimum(jnp.exp(log_value), jnp.finfo(log_value.dtype).max)


def _advantages(advantages, lr: Array) -> Array:
    adv = jnp.asarray(advantages, lr.dtype)
    if adv.shape != lr.shape:
        raise ValueError(f"advantages shape {adv.shape} differs from {lr.shape}")
    return adv


def _binary_kl(lq: Array, lp: Array) -> Array:
    """KL(Bernoulli(q) ‖ Bernoulli(p)) for q = e^lq, p = e^lp (lq, lp ≤ 0), never NaN.

    Each term a·log(a/b) is 0 where a = 0 (whatever b, 0 included) and +inf where a > 0 = b.
    1 − q and 1 − p are −expm1 of the logs, accurate where q or p rounds to 1."""
    q, nq, n_p = jnp.exp(lq), -jnp.expm1(lq), -jnp.expm1(lp)
    head = jnp.where(q > 0, q * (lq - lp), 0.0)  # lp = −inf: +inf
    tail = jnp.where(nq > 0, nq * (jnp.log(nq) - jnp.log(n_p)), 0.0)  # 1 − p = 0: +inf
    return head + tail


def _dual_clip_autograd(w: Array, adv: Array, eps: float, cap: float) -> Array:
    """ω of the dual-clip loss of verl, NeMo-RL and SkyRL under PyTorch's autograd: the
    gradient of min(max(−A·w, −A·clip(w, 1 − ε, 1 + ε)), −A·c) (the min for A < 0 only) with
    respect to log π, over −A. ``clamp`` passes the gradient on its closed range; ``maximum``
    and ``minimum`` give each of two equal sides half of its own gradient. Where A = 0 the
    gradient is 0 whatever ω, and ω = w."""
    lo, hi = 1.0 - eps, 1.0 + eps
    inside = ((w >= lo) & (w <= hi)).astype(w.dtype)  # the clipped side's share of w
    l1, l2, l3 = -adv * w, -adv * jnp.clip(w, lo, hi), -adv * cap
    share = jnp.where(l1 > l2, 1.0, jnp.where(l1 < l2, inside, 0.5 * (1.0 + inside)))
    top = jnp.maximum(l1, l2)
    dual = jnp.where(top < l3, share, jnp.where(top > l3, 0.0, 0.5 * share))
    share = jnp.where(adv < 0, dual, share)
    return jnp.where(adv == 0, w, share * w)


def _dppo_dropped(
    name: str,
    tau: float,
    lr: Float[ArrayLike, "batch time"],
    advantages: Float[ArrayLike, "batch time"],
    logp_inf: Float[ArrayLike, "batch time"] | None,
) -> Array:
    """Where DPPO's binary TV or KL mask drops a token: the divergence of the sampled token's
    Bernoulli laws exceeds τ and the advantage pushes π(y) further from π'(y)."""
    if logp_inf is None:
        raise ValueError(f"estimator {name!r} needs logp_inf (log π_inf of the sampled tokens)")
    adv = _advantages(advantages, lr)
    lq = jnp.asarray(logp_inf, lr.dtype)
    if lq.shape != lr.shape:
        raise ValueError(f"logp_inf shape {lq.shape} differs from {lr.shape}")
    lq = jnp.minimum(lq, 0.0)
    lp = jnp.minimum(lq + lr, 0.0)
    q, pr = jnp.exp(lq), jnp.exp(lp)
    up, down = pr > q, pr < q
    if name == "dppo_tv":
        return ((adv > 0) & (pr - q > tau)) | ((adv < 0) & (q - pr > tau))
    far = _binary_kl(lq, lp) > tau
    return ((adv > 0) & up & far) | ((adv < 0) & down & far)


def _kept(crit: Criterion, lr: Float[Array, "batch time"], valid: Array) -> Array:
    """Where one rejection criterion keeps the token (padding holds log w = 0: k = 0)."""
    k = {1: -lr, 2: 0.5 * lr * lr, 3: jnp.expm1(lr) - lr}[crit.k]
    if crit.level == "token":
        stat = k
    elif crit.level == "seq_max":
        stat = jnp.max(jnp.where(valid, k, 0.0), axis=1, keepdims=True)
    else:
        stat = jnp.sum(jnp.where(valid, k, 0.0), axis=1, keepdims=True)
        if crit.level == "seq_mean":
            n = jnp.sum(valid, axis=1, keepdims=True)
            stat = stat / jnp.maximum(n, 1).astype(lr.dtype)
    if crit.k == 1:
        return (stat >= math.log(crit.a)) & (stat <= math.log(crit.b))
    return stat <= crit.tau


def correction_weights(
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
) -> Float[Array, "batch time"]:
    """The per-token multiplier ω (stop-gradient) of ∇log π_train(y_t) · A_t for ``name``.

    ``log_ratio`` is log π_train(y_t) − log π_inf(y_t) at the sampled tokens; ``mask`` is 1 on
    real tokens and 0 on padding (ω = 0 there). ``advantages`` matters to ``ppo_clip``,
    ``dual_clip``, ``dppo_*``, ``opsm`` and ``sapo``;
    ``token_tv`` (``tv_mask``) and ``token_kl`` (``kl_mask``, KL(π_inf‖π_train)) are the
    full-vocabulary divergences at each position; ``logp_inf`` (``dppo_tv``, ``dppo_kl``) is
    log π_inf(y_t) at the sampled tokens. ``ties`` picks whose rule decides a token on a
    threshold: ``None`` ours, or a framework of ``kernels.rl.ties.FRAMEWORKS`` (ValueError for
    an estimator that framework does not have). ``name``, ``params`` and ``ties`` are static
    (Python values); the arrays may be traced, so the function works under ``jax.jit``.
    """
    p = check_params(name, params)
    space = tie_rule(ties, name).space
    log_ratio = jnp.asarray(log_ratio)
    if not jnp.issubdtype(log_ratio.dtype, jnp.floating) or log_ratio.dtype.itemsize < 4:
        log_ratio = log_ratio.astype(jnp.float32)  # 16-bit log-probs get float32 weights
    dtype = log_ratio.dtype
    if log_ratio.ndim != 2:
        raise ValueError(f"log_ratio must have shape (batch, time), got {log_ratio.shape}")
    mask = jnp.asarray(mask)
    if mask.shape != log_ratio.shape:
        raise ValueError(f"mask shape {mask.shape} differs from log_ratio shape {log_ratio.shape}")
    valid = mask > 0
    lr = jnp.where(valid, log_ratio, jnp.zeros((), dtype))
    w = _saturating_exp(lr)

    if name == "plain":
        omega = jnp.ones_like(lr)
    elif name == "tis":
        omega = _capped_exp(lr, p["cap"])
    elif name == "mis":
        keep = w <= p["cap"] if space == "ratio" else lr <= math.log(p["cap"])
        omega = jnp.where(keep, w, 0.0)
    elif name in ("ppo_clip", "dual_clip"):
        adv = _advantages(advantages, lr)
        eps = p["clip_epsilon"]
        clipped = ((adv > 0) & (w > 1.0 + eps)) | ((adv < 0) & (w < 1.0 - eps))
        if name == "dual_clip":
            clipped |= (adv < 0) & (w > p["cap"])
        omega = jnp.where(clipped, 0.0, w)
        if space == "loss":
            omega = _dual_clip_autograd(w, adv, eps, p["cap"])
    elif name in ("dppo_tv", "dppo_kl"):
        omega = jnp.where(_dppo_dropped(name, p["threshold"], lr, advantages, logp_inf), 0.0, w)
    elif name == "tis_mask":
        lo, hi = p["band"]
        if space == "k1":  # verl: token TIS with the token_k1 rejection "1/hi_1/lo"
            if lo == 0:
                raise ValueError(
                    f"estimator 'tis_mask' with ties={ties!r}: a band from 0 has no token_k1 "
                    "form (its upper threshold would be 1/0)"
                )
            keep = _kept(Criterion("token", 1, 1 / hi, 1 / lo, None), lr, valid)
        else:
            keep = (w >= lo) & (w <= hi)
        omega = jnp.where(keep, _capped_exp(lr, p["cap"]), 0.0)
    elif name == "seq_mask":
        lo, hi = p["band"]
        log_seq = jnp.sum(lr, axis=1, keepdims=True)
        if space == "ratio":
            big_w = _saturating_exp(log_seq)
            keep, kept = (big_w >= lo) & (big_w <= hi), big_w
        else:
            log_lo = math.log(lo) if lo > 0 else -math.inf
            keep = (log_seq >= log_lo) & (log_seq <= math.log(hi))
            kept = _capped_exp(log_seq, hi)
        omega = jnp.where(keep, jnp.broadcast_to(kept, lr.shape), 0.0)
    elif name == "seq_outlier":
        lo, hi = p["band"]
        outside = valid & ((w < lo) | (w > hi))
        omega = jnp.where(jnp.any(outside, axis=1, keepdims=True), 0.0, w)
    elif name == "kl_reject":
        keep = jnp.ones(lr.shape, bool)
        for crit in parse_rejection(p["reject"], p["reject_threshold"]):
            keep &= _kept(crit, lr, valid)
        omega = jnp.where(keep, w, 0.0)
    elif name == "opsm":
        adv = _advantages(advantages, lr)
        n = jnp.sum(valid, axis=1, keepdims=True)
        mean_k1 = -jnp.sum(lr, axis=1, keepdims=True) / jnp.maximum(n, 1).astype(dtype)
        omega = jnp.where((adv < 0) & (mean_k1 > p["threshold"]), 0.0, w)
    elif name == "icepop":
        lo, hi = p["band"]
        omega = jnp.where((w >= lo) & (w <= hi), w, 0.0)
    elif name == "tis_clip":
        lo, hi = p["band"]
        omega = jnp.maximum(_capped_exp(lr, hi), lo)
    elif name == "tis_norm":
        capped = jnp.where(valid, _capped_exp(lr, p["cap"]), 0.0)
        mean = jnp.sum(capped) / jnp.maximum(jnp.sum(valid), 1).astype(dtype)
        omega = jnp.where(mean > 1e-8, capped / jnp.maximum(mean, 1e-8), capped)
    elif name == "sapo":
        omega = sapo_gate_weight(w, _advantages(advantages, lr), *p["temperatures"])
        if ties in ("verl", "skyrl"):  # exp of the log-ratio clamped to ±20: no gradient beyond
            omega = jnp.where(jnp.abs(lr) > 20.0, 0.0, omega)
    elif name in ("seq_is", "seq_tis"):
        log_seq = jnp.sum(lr, axis=1, keepdims=True)
        if name == "seq_is":
            omega = jnp.broadcast_to(_saturating_exp(log_seq), lr.shape)
        else:
            omega = jnp.broadcast_to(_capped_exp(log_seq, p["cap"]), lr.shape)
    elif name == "geo_mask":
        lo, hi = p["band"]
        n = jnp.sum(valid, axis=1, keepdims=True)
        log_geo = jnp.sum(lr, axis=1, keepdims=True) / jnp.maximum(n, 1).astype(dtype)
        if space == "ratio":
            geo = jnp.exp(log_geo)
            keep = (geo >= lo) & (geo <= hi)
        else:
            log_lo = math.log(lo) if lo > 0 else -math.inf
            keep = (log_geo >= log_lo) & (log_geo <= math.log(hi))
        omega = jnp.where(keep, w, 0.0)
    else:  # tv_mask, kl_mask
        div = token_tv if name == "tv_mask" else token_kl
        if div is None:
            arg = "token_tv" if name == "tv_mask" else "token_kl"
            raise ValueError(f"estimator {name!r} needs {arg}")
        div = jnp.asarray(div, dtype)
        if div.shape != lr.shape:
            raise ValueError(f"divergence shape {div.shape} differs from {lr.shape}")
        omega = jnp.where(div > p["threshold"], 0.0, w)

    omega = jnp.where(valid, omega, 0.0).astype(dtype)
    return jax.lax.stop_gradient(omega)
