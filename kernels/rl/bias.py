"""The bias of each policy-gradient estimator on the shipped policy: exact and Monte Carlo.

Rollouts are sampled from π' = softmax(z'/T) (K_inf logits z'); the learner's gradient is that
of J = E_π[R] under π = softmax(z/T) (K_train logits z). An estimator multiplies each token's
∇log π(y_t)·A by its correction weight ω (``kernels.rl.estimators``); its bias is
E_π'[Σ_t ω_t·A·∇log π(y_t)] − ∇J.

**Bandit (one token, exact).** For a prompt, every candidate token y is a one-token rollout
with weight ω(y) and advantage A(y) = r(y) − E_π'[r] (the sampling policy's mean reward, the
value a group mean estimates). Summing over the whole vocabulary,

    bias = Σ_y (π'(y)·ω(y) − π(y)) · A(y) · g(y) = Σ_y π'(y)·(ω(y) − w(y)) · A(y) · g(y).

``realised`` is its norm for the model's own scores: g(y) = ∇_b log softmax((z + b)/T)(y) at
b = 0, the gradient with respect to a bias on the LM head's logits, which is (e_y − π)/T.
``worst_case`` is G·A·E_π'|ω − w| with G = max_y ‖g(y)‖ and A = max_y |A(y)| at the prompt:
the most any scores and advantages within those norms can give, attained when A(y)·g(y) has
norm G·A and points along sign(ω − w). realised ≤ worst_case always.

**Sequences (Monte Carlo).** Sequences y are sampled by K_inf and teacher-forced through
K_train. With W = Π_t w_t, E_π'[W·A·Σ_t g_t] = ∇J exactly, so the bias is
E_π'[A·Σ_t (ω_t − W)·g_t], a mean over independent sequences. ``discrepancy`` estimates
E_π'[|A|·Σ_t |ω_t − W|] (times G it bounds the bias for any scores of norm ≤ G) and
``realised`` the norm of the bias for the logit-bias scores, via the unbiased estimate
(‖Σ_i x_i‖² − Σ_i ‖x_i‖²)/(n(n − 1)) of its square. Both come with percentile-bootstrap
confidence intervals (``level``, resampling whole sequences).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from types import MappingProxyType
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from kernel_contracts.contracts.checks import check_temperature
from kernel_contracts.kernels.rl.estimators import check_params, correction_weights

__all__ = [
    "BanditBias",
    "Interval",
    "SequenceBias",
    "bandit_bias",
    "bandit_weights",
    "clip_share",
    "divergences",
    "sequence_bias",
]

_NO_PARAMS: Mapping[str, object] = MappingProxyType({})


class BanditBias(NamedTuple):
    """Exact bias of one estimator at each prompt (one-token rollouts, full vocabulary)."""

    realised: Float[Array, " prompts"]  # ‖bias‖ for the logit-bias scores (e_y − π)/T
    worst_case: Float[Array, " prompts"]  # G·A·E_π'|ω − w| at the prompt's own G and A
    discrepancy: Float[Array, " prompts"]  # E_π'|ω − w|
    score_norm: Float[Array, " prompts"]  # G: max_y ‖(e_y − π)/T‖
    advantage_max: Float[Array, " prompts"]  # A: max_y |A(y)|
    drift: Float[Array, " prompts"]  # ‖z' − z‖∞


class Interval(NamedTuple):
    """A point estimate and its confidence interval at ``level``."""

    estimate: float
    lower: float
    upper: float
    level: float


class SequenceBias(NamedTuple):
    """Monte-Carlo bias of one estimator over sampled sequences."""

    discrepancy: Interval  # E_π'[|A|·Σ_t |ω_t − W|]
    realised: Interval  # ‖E_π'[A·Σ_t (ω_t − W)·(e_{y_t} − π_t)/T]‖
    score_norm: float  # G: the largest ‖(e_{y_t} − π_t)/T‖ over sampled tokens
    advantage_max: float  # A: the largest |A| over the sequences
    baseline: float  # b in A = R − b, the same for every sequence
    samples: int  # sequences
    length: int  # generated tokens per sequence
    method: str  # how the interval was computed


def _phi(u):
    """e^u − 1 − u, accurate for small u (a series below 0.1 in magnitude)."""
    series = u * u * (0.5 + u * (1 / 6 + u * (1 / 24 + u * (1 / 120))))
    safe = jnp.where(jnp.abs(u) < 0.1, 1.0, u)
    return jnp.where(jnp.abs(u) < 0.1, series, jnp.expm1(safe) - safe)


@jax.jit
def divergences(
    z_train: Float[ArrayLike, "rows vocab"],
    z_inf: Float[ArrayLike, "rows vocab"],
    temperature: Float[ArrayLike, ""] | float,
) -> dict[str, Array]:
    """Per row: log w over the vocabulary, π, π', TV(π, π'), KL(π'‖π) and the logit drift.

    log w(y) = −Δ(y)/T + log E_π[e^{Δ/T}] with Δ = z' − z, computed from Δ itself so it keeps
    its relative accuracy when the drift is tiny; TV = E_π'[(w − 1)₊] and
    KL(π'‖π) = E_π'[w − 1 − log w] are sums of non-negative terms.
    """
    z = jnp.asarray(z_train, jnp.float32)
    zp = jnp.asarray(z_inf, jnp.float32)
    inv_t = 1.0 / jnp.asarray(temperature, jnp.float32)
    p = jax.nn.softmax(z * inv_t, axis=-1)
    q = jax.nn.softmax(zp * inv_t, axis=-1)
    d = (zp - z) * inv_t
    top = jnp.max(d, axis=-1, keepdims=True)
    log_w = top - d + jnp.log(jnp.sum(p * jnp.exp(d - top), axis=-1, keepdims=True))
    return {
        "log_w": log_w,
        "p": p,
        "q": q,
        "tv": jnp.sum(q * jnp.maximum(jnp.expm1(log_w), 0.0), axis=-1),
        "kl_inf_train": jnp.sum(q * _phi(log_w), axis=-1),
        "drift": jnp.max(jnp.abs(zp - z), axis=-1),
    }


def bandit_weights(
    name: str,
    log_w: Float[ArrayLike, "prompts vocab"],
    advantages: Float[ArrayLike, "prompts vocab"],
    token_tv: Float[ArrayLike, " prompts"],
    token_kl: Float[ArrayLike, " prompts"],
    params: Mapping[str, object] = _NO_PARAMS,
    logp_inf: Float[ArrayLike, "prompts vocab"] | None = None,
) -> Float[Array, "prompts vocab"]:
    """ω(y) of every candidate token y, each scored as a one-token rollout of its prompt.

    The weights come from ``correction_weights`` itself (one row per candidate, one time
    step), so they are the weights the training update applies. ``logp_inf`` is log π'(y) of
    every candidate (the DPPO masks read it).
    """
    prompts, vocab = log_w.shape
    flat = (prompts * vocab, 1)
    per_prompt = lambda x: jnp.broadcast_to(jnp.asarray(x)[:, None], log_w.shape).reshape(flat)  # noqa: E731
    omega = correction_weights(
        name,
        log_w.reshape(flat),
        jnp.ones(flat, log_w.dtype),
        jnp.asarray(advantages, log_w.dtype).reshape(flat),
        params=params,
        token_tv=per_prompt(token_tv),
        token_kl=per_prompt(token_kl),
        logp_inf=None if logp_inf is None else jnp.asarray(logp_inf, log_w.dtype).reshape(flat),
    )
    return omega.reshape(log_w.shape)


def _score_norms(p):
    """‖(e_y − π)/T‖ · T for every y: √(1 − 2π(y) + Σπ²)."""
    return jnp.sqrt(jnp.maximum(1.0 - 2.0 * p + jnp.sum(p * p, axis=-1, keepdims=True), 0.0))


def _frozen(name: str, params: Mapping[str, object]) -> tuple:
    """The checked parameters as a sorted tuple of pairs."""
    return tuple(sorted(check_params(name, params).items()))


def _bandit(name, params, z_train, z_inf, reward, temperature):
    div = divergences(z_train, z_inf, temperature)
    p, q, log_w = div["p"], div["q"], div["log_w"]
    r = jnp.broadcast_to(jnp.asarray(reward, jnp.float32), p.shape)
    adv = r - jnp.sum(q * r, axis=-1, keepdims=True)
    log_q = jax.nn.log_softmax(z_inf / temperature, axis=-1)
    omega = bandit_weights(
        name, log_w, adv, div["tv"], div["kl_inf_train"], dict(params), logp_inf=log_q
    )
    w = jnp.exp(log_w)
    coef = q * (omega - w) * adv  # π'(ω − w)·A, the bias's weight on g(y)
    bias = (coef - p * jnp.sum(coef, axis=-1, keepdims=True)) / temperature
    discrepancy = jnp.sum(q * jnp.abs(omega - w), axis=-1)
    score_norm = jnp.max(_score_norms(p), axis=-1) / temperature
    adv_max = jnp.max(jnp.abs(adv), axis=-1)
    return BanditBias(
        realised=jnp.linalg.norm(bias, axis=-1),
        worst_case=score_norm * adv_max * discrepancy,
        discrepancy=discrepancy,
        score_norm=score_norm,
        advantage_max=adv_max,
        drift=div["drift"],
    )


def bandit_bias(
    name: str,
    z_train: Float[ArrayLike, "prompts vocab"],
    z_inf: Float[ArrayLike, "prompts vocab"],
    reward: Float[ArrayLike, "prompts vocab"] | Float[ArrayLike, " vocab"],
    temperature: float,
    params: Mapping[str, object] = _NO_PARAMS,
) -> BanditBias:
    """The exact bias of estimator ``name`` at each prompt (module docstring).

    ``z_train`` and ``z_inf`` are the two kernels' logits of each prompt's next token;
    ``reward`` is r(y) for every token (one row per prompt, or one row for all).
    """
    _check_logits(z_train, z_inf, temperature)
    return _bandit(
        name,
        _frozen(name, params),
        jnp.asarray(z_train, jnp.float32),
        jnp.asarray(z_inf, jnp.float32),
        jnp.asarray(reward, jnp.float32),
        jnp.float32(temperature),
    )


def _check_logits(z_train, z_inf, temperature) -> None:
    if np.ndim(z_train) != 2 or np.shape(z_train) != np.shape(z_inf):
        raise ValueError(
            f"expected z_train and z_inf [prompts, vocab], got {np.shape(z_train)} and "
            f"{np.shape(z_inf)}"
        )
    check_temperature(temperature)


def clip_share(
    z_train: Float[ArrayLike, "prompts vocab"],
    z_inf: Float[ArrayLike, "prompts vocab"],
    temperature: float,
    clip_epsilon: float,
) -> Float[Array, " prompts"]:
    """The share of PPO's clip range the kernel pair uses at each prompt:
    max_y |w(y) − 1| / ε over the whole vocabulary (old policy π', new policy π)."""
    _check_logits(z_train, z_inf, temperature)
    if not 0.0 < clip_epsilon < 1.0:
        raise ValueError(f"clip_epsilon must be in (0, 1), got {clip_epsilon}")
    log_w = divergences(z_train, z_inf, jnp.float32(temperature))["log_w"]
    return jnp.max(jnp.abs(jnp.expm1(log_w)), axis=-1) / clip_epsilon


def _bootstrap_mean(values: np.ndarray, level: float, resamples: int, seed: int) -> Interval:
    """The sample mean of ``values`` and its percentile-bootstrap interval."""
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    means = values[rng.integers(0, n, (resamples, n))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(float(values.mean()), float(lo), float(hi), level)


def _norm_interval(gram: np.ndarray, level: float) -> Interval:
    """‖E x‖ from the Gram matrix of n samples: the unbiased U-statistic of ‖E x‖², a normal
    interval for it with the jackknife's standard error, and square roots of the (clipped)
    endpoints."""
    n = gram.shape[0]
    off = gram.sum() - np.trace(gram)  # Σ_{i≠j} x_i·x_j
    u = off / (n * (n - 1))
    if n > 2:
        rows = gram.sum(axis=1) - np.diag(gram)  # Σ_{j≠i} x_i·x_j
        loo = (off - 2.0 * rows) / ((n - 1) * (n - 2))  # U without sample i
        se = math.sqrt((n - 1) / n * float(np.sum((loo - loo.mean()) ** 2)))
    else:
        se = math.inf
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    root = lambda v: math.sqrt(max(v, 0.0))  # noqa: E731
    return Interval(root(u), root(u - z * se), root(u + z * se), level)


def _sequences(name, params, tokens, z_train, z_inf, reward_table, temperature, baseline):
    seqs, new, vocab = z_train.shape
    div = divergences(z_train.reshape(-1, vocab), z_inf.reshape(-1, vocab), temperature)
    flat_y = tokens.reshape(-1)
    log_ratio = div["log_w"][jnp.arange(flat_y.shape[0]), flat_y].reshape(seqs, new)
    log_q = jax.nn.log_softmax(z_inf.reshape(-1, vocab) / temperature, axis=-1)
    logp_inf = log_q[jnp.arange(flat_y.shape[0]), flat_y].reshape(seqs, new)
    reward = reward_table[tokens].mean(axis=1)
    adv = reward - (jnp.mean(reward) if baseline is None else baseline)
    mask = jnp.ones((seqs, new), jnp.float32)
    omega = correction_weights(
        name,
        log_ratio,
        mask,
        jnp.broadcast_to(adv[:, None], (seqs, new)),
        params=dict(params),
        token_tv=div["tv"].reshape(seqs, new),
        token_kl=div["kl_inf_train"].reshape(seqs, new),
        logp_inf=logp_inf,
    )
    gap = omega - correction_weights("seq_is", log_ratio, mask, mask)  # ω_t − W
    # x_i = A_i/T · Σ_t (ω_t − W)(e_{y_t} − π_t): the bias's sample, one vector per sequence
    p = div["p"].reshape(seqs, new, vocab)
    onehot = jax.nn.one_hot(tokens, vocab, dtype=jnp.float32)
    x = adv[:, None] / temperature * jnp.sum(gap[..., None] * (onehot - p), axis=1)
    norms = jnp.take_along_axis(_score_norms(p), tokens[..., None], axis=-1)
    return {
        "per_seq": jnp.abs(adv) * jnp.sum(jnp.abs(gap), axis=1),
        "x": x,
        "score_norm": jnp.max(norms) / temperature,
        "advantage_max": jnp.max(jnp.abs(adv)),
        "baseline": jnp.mean(reward) if baseline is None else jnp.float32(baseline),
    }


def sequence_bias(
    name: str,
    tokens: Int[ArrayLike, "seqs new"],
    z_train: Float[ArrayLike, "seqs new vocab"],
    z_inf: Float[ArrayLike, "seqs new vocab"],
    reward_table: Float[ArrayLike, " vocab"],
    temperature: float,
    params: Mapping[str, object] = _NO_PARAMS,
    *,
    baseline: float | None = None,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> SequenceBias:
    """Monte-Carlo bias of estimator ``name`` over sequences sampled by K_inf (module docstring).

    ``tokens`` are the generated tokens (sampled from softmax(z_inf/T)), ``z_train`` and
    ``z_inf`` the logits that predicted them. The reward of a sequence is the mean of
    ``reward_table`` over its generated tokens (a verifiable rule); its advantage is
    A = R − b with one baseline b for all sequences: ``baseline``, or by default the mean reward
    of the sample, which is then held fixed: the intervals are for the bias at that baseline
    (the value a GRPO group mean estimates). ``discrepancy`` gets a percentile-bootstrap interval
    (``resamples`` resamples of whole sequences, ``seed``), ``realised`` a jackknife normal
    interval on its square; both at ``level``.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    check_temperature(temperature)
    tokens = jnp.asarray(tokens, jnp.int32)
    if tokens.ndim != 2 or tokens.shape[0] < 3 or tokens.shape[1] < 1:
        raise ValueError(f"expected tokens [seqs >= 3, new >= 1], got {tokens.shape}")
    seqs, new = tokens.shape
    vocab = np.shape(z_train)[-1]
    if np.shape(z_train) != (seqs, new, vocab) or np.shape(z_inf) != np.shape(z_train):
        raise ValueError(
            f"expected logits [{seqs}, {new}, vocab] for tokens {tokens.shape}, got "
            f"{np.shape(z_train)} and {np.shape(z_inf)}"
        )
    table = jnp.asarray(reward_table, jnp.float32)
    if table.shape != (vocab,):
        raise ValueError(f"expected a reward table [{vocab}], got {table.shape}")
    out = _sequences(
        name,
        _frozen(name, params),
        tokens,
        jnp.asarray(z_train, jnp.float32),
        jnp.asarray(z_inf, jnp.float32),
        table,
        jnp.float32(temperature),
        baseline,
    )
    x = np.asarray(out["x"], np.float64)
    return SequenceBias(
        discrepancy=_bootstrap_mean(np.asarray(out["per_seq"], np.float64), level, resamples, seed),
        realised=_norm_interval(x @ x.T, level),
        score_norm=float(out["score_norm"]),
        advantage_max=float(out["advantage_max"]),
        baseline=float(out["baseline"]),
        samples=seqs,
        length=new,
        method=(
            f"discrepancy: percentile bootstrap over sequences ({resamples} resamples, seed "
            f"{seed}); realised: U-statistic of the squared norm with a jackknife normal "
            f"interval; level {level}"
        ),
    )
