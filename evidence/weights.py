"""Weight diagnostics of a log: what each correction of the contract does to its tokens.

For every estimator a contract's ``pg_bias`` guarantees name (with the parameters they name),
the weights ω of the log's tokens are computed by ``kernels.rl.numpy_weights`` (the one
definition of the estimators, ``kernels.rl.correction_weights``, computed by NumPy: a log's
diagnostics load no JAX) from the log ratio log w = ℓ − ℓ' of each sampled token, its
sequence, and log π'(y) = ℓ'. Over the n tokens and the S sequences that have tokens:

- ``ess`` = (Σω)² / Σω², the effective sample size of the weights (Kish), and
  ``ess_per_token`` = ess / n;
- ``weight_mean`` and ``weight_max``: the mean and the maximum of ω over tokens;
- ``clip_fraction``: the share of tokens kept (ω > 0) with a weight other than their own ratio
  w and their sequence's W = Π w: a truncated weight (a kept weight within 0.1% of w or of W,
  float32 rounding, counts as untruncated);
- ``masked_fraction``: the share of tokens with ω = 0;
- ``seq_masked_fraction``: the share of sequences with at least one token of ω = 0, and
  ``seq_rejected_fraction``: the share of sequences whose every token has ω = 0 (the whole
  sequence rejected).

These are ours, on the estimator's ω. Next to them come the numbers the frameworks log under
their own names (``rollout_corr/rollout_is_mean``, NeMo-RL's ``is_oob_ratio``, ...), each by
its framework's definition on the weights of the setting ``verify export`` writes for the
estimator (``evidence.framework_weights``); they need not equal ours (verl's
``rollout_is_mean`` is taken before its rejection mask, NeMo-RL's ``is_oob_ratio`` counts
truncated tokens under ``tis``).

An estimator whose weights depend on what a sampled-token log does not record is not diagnosed,
and the reason is given instead: the full-vocabulary divergences (``tv_mask``, ``kl_mask``:
the weights refuse to be computed without them), or the advantages (the weights are
computed with every advantage +1 and again with every advantage −1; when they differ, they
depend on the advantage's sign). When they agree, no rule that reads only each token's or
sequence's advantage sign could give other weights, so the diagnostics hold whatever the
advantages were. When they differ, a framework's numbers that read no advantage are still
given: TRL logs ``sampling/importance_sampling_ratio/*`` for the ``opsm`` export from its ratio
before the off-policy mask, which alone reads the advantage. ``clip_cov`` and ``kl_cov`` pick
tokens by the batch covariance of advantage and log-probability, which a constant advantage
makes 0 whatever the sign: they are not diagnosed, without running the sign test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from jaxtyping import Float, Int

from kernel_contracts.contracts.fields import ESTIMATOR_PARAMS

from .framework_weights import FRAMEWORK_NAMES, chunk_parts, finish, merge

__all__ = ["NAMES", "OUR_NAMES", "estimators_of", "label", "weight_diagnostics"]

# our diagnostics of one estimator, in the order they are reported
OUR_NAMES = (
    "ess",
    "ess_per_token",
    "weight_mean",
    "weight_max",
    "clip_fraction",
    "masked_fraction",
    "seq_masked_fraction",
    "seq_rejected_fraction",
)
# every name a report may hold for an estimator: ours, then the frameworks'
NAMES = OUR_NAMES + FRAMEWORK_NAMES
_SAME = 1e-3  # relative distance under which a kept weight counts as its untruncated ratio
_CELLS = 1 << 20  # the most (sequence, position) cells weighed at once

Estimator = tuple[str, tuple[tuple[str, object], ...]]  # name and (parameter, value) pairs


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(repr(float(v)) for v in value) + "]"
    if isinstance(value, str):  # kl_reject's criteria and thresholds, in verl's spelling
        return value
    return repr(float(value))


def label(estimator: Estimator) -> str:
    """E.g. ``tis(cap=2.0)``, ``icepop(band=[0.5, 2.0])``: the estimator as reports key it."""
    name, params = estimator
    return f"{name}({', '.join(f'{k}={_shown(v)}' for k, v in params)})"


def estimators_of(contract) -> tuple[Estimator, ...]:
    """The distinct estimators (other than ``plain``) of ``contract``'s ``pg_bias``
    guarantees with their parameters, in contract order."""
    out: dict[Estimator, None] = {}
    for g in contract.guarantees:
        if g.quantity != "pg_bias" or g.estimator == "plain":
            continue
        params = tuple((k, getattr(g, k)) for k in ESTIMATOR_PARAMS.get(g.estimator, ()))
        out[(g.estimator, params)] = None
    return tuple(out)


def _rows(sequence: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Each token's row (its sequence among those with tokens) and column (its index in the
    sequence, in log order); the number of rows and the longest row."""
    _, row = np.unique(sequence, return_inverse=True)
    row = row.ravel()
    order = np.argsort(row, kind="stable")
    lengths = np.bincount(row)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    col = np.empty_like(row)
    col[order] = np.arange(row.size) - np.repeat(starts, lengths)
    return row, col, int(lengths.size), int(lengths.max())


def _pad(n: int, step: int) -> int:
    return max(step, -(-n // step) * step)


def _weights(
    name: str, params: Mapping, lr, lq, valid, sign: float, ties: str | None = None
) -> np.ndarray:
    from kernel_contracts.kernels.rl.weight_rules import numpy_weights

    advantages = np.full(lr.shape, sign, np.float32)
    return np.asarray(
        numpy_weights(name, lr, valid, advantages, params=params, logp_inf=lq, ties=ties),
        dtype=np.float64,
    )


def _weigher(lq, valid):
    """``correction_weights`` on one chunk's cells, by name, parameters, tie rule and log w."""

    def weigh(name: str, params: Mapping, ties: str | None, log_w: np.ndarray) -> np.ndarray:
        return _weights(name, params, log_w, lq, valid, 1.0, ties)

    return weigh


def _one(
    estimator: Estimator,
    log_w: np.ndarray,
    rollout: np.ndarray,
    row,
    col,
    rows: int,
    width: int,
    empty: int,
) -> tuple[str | None, dict[str, float]]:
    """Why a log cannot give our diagnostics of one estimator (``None`` where it can), and
    the numbers it gives: ours and the frameworks', or, where the weights depend on the
    advantages, the frameworks' numbers that read none."""
    name, pairs = estimator
    params = dict(pairs)
    per = max(1, _CELLS // width)
    s1 = s2 = 0.0
    top, clipped, masked = -math.inf, 0, 0
    seq_any, seq_all = 0, 0
    theirs: dict = {}
    why: str | None = None
    if name in ("clip_cov", "kl_cov"):  # a sign test cannot see what the covariance reads
        why = (
            "its weights depend on the advantages' values across the batch (the covariance "
            "of advantage and log-probability picks the tokens), which a log does not record"
        )
    for first in range(0, rows, per):
        last = min(rows, first + per)
        pick = (row >= first) & (row < last)
        r, c = row[pick] - first, col[pick]
        shape = (_pad(last - first, 8), _pad(width, 64))  # few distinct shapes
        lr = np.zeros(shape, np.float32)
        lq = np.zeros(shape, np.float32)
        valid = np.zeros(shape, np.float32)
        lr[r, c], lq[r, c], valid[r, c] = log_w[pick], rollout[pick], 1.0
        weigh = _weigher(lq, valid)
        part = chunk_parts(name, params, lr, valid > 0, empty if first == 0 else 0, weigh)
        theirs = merge(theirs, part)
        if why is not None:
            continue
        try:
            up = _weights(name, params, lr, lq, valid, 1.0)
            down = _weights(name, params, lr, lq, valid, -1.0)
        except ValueError as err:  # e.g. tv_mask and kl_mask need token_tv, token_kl
            return f"its weights need what a sampled-token log does not give ({err})", {}
        if not np.array_equal(up, down):
            why = (
                "its weights depend on the advantages, which a log does not record (the "
                "tokens' weights differ between all advantages +1 and all −1)"
            )
            continue
        omega = up[r, c]
        s1 += float(omega.sum())
        s2 += float(np.dot(omega, omega))
        top = max(top, float(omega.max()))
        lw = log_w[pick]
        seq_log = np.bincount(r, weights=lw, minlength=last - first)[r]
        with np.errstate(over="ignore"):
            near_w = np.abs(omega - np.exp(lw)) <= _SAME * np.exp(lw)
            near_seq = np.abs(omega - np.exp(seq_log)) <= _SAME * np.exp(seq_log)
        kept = omega > 0
        clipped += int(np.count_nonzero(kept & ~near_w & ~near_seq))
        masked += int(np.count_nonzero(~kept))
        zeros = np.bincount(r, weights=(~kept).astype(np.float64), minlength=last - first)
        counts = np.bincount(r, minlength=last - first)
        seq_any += int(np.count_nonzero(zeros > 0))
        seq_all += int(np.count_nonzero(zeros == counts))
    if why is not None:  # the frameworks' numbers that read no advantage (TRL's for opsm)
        return why, finish(theirs)
    n = log_w.size
    out = {}
    if s2 > 0 and math.isfinite(s2):
        out["ess"] = s1 * s1 / s2
        out["ess_per_token"] = s1 * s1 / s2 / n
    out["weight_mean"] = s1 / n
    out["weight_max"] = top
    out["clip_fraction"] = clipped / n
    out["masked_fraction"] = masked / n
    out["seq_masked_fraction"] = seq_any / rows
    out["seq_rejected_fraction"] = seq_all / rows
    ours = {k: out[k] for k in OUR_NAMES if k in out and math.isfinite(out[k])}
    return None, ours | finish(theirs)


def weight_diagnostics(
    estimators: tuple[Estimator, ...],
    log_ratio: Float[np.ndarray, " tokens"],
    rollout_logprob: Float[np.ndarray, " tokens"],
    sequence: Int[np.ndarray, " tokens"],
    *,
    sequences: int | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """``({label: {name: number}}, {label: why not})`` for ``estimators`` on the tokens given
    by their log ratio log w, their log π'(y) and their sequence number (padding removed). An
    estimator whose weights depend on the advantages has a reason, and numbers only where a
    framework logs some for its export that read no advantage (TRL's ratio for ``opsm``).
    A token whose log ratio or log π'(y) is not finite is left out (the clauses count it as a
    non-finite value). ``sequences``, the number of sequences the log holds (those with no
    token included), lets the frameworks' numbers count the empty ones where the framework
    does; our own numbers count the sequences with tokens. No tokens, or no estimators:
    ``({}, {})``."""
    log_w = np.asarray(log_ratio, np.float64)
    rollout = np.asarray(rollout_logprob, np.float64)
    seq = np.asarray(sequence, np.int64)
    finite = np.isfinite(log_w) & np.isfinite(rollout)
    log_w, rollout, seq = log_w[finite], rollout[finite], seq[finite]
    if not estimators or log_w.size == 0:
        return {}, {}
    row, col, rows, width = _rows(seq)
    empty = max(0, sequences - rows) if sequences is not None else 0
    numbers: dict[str, dict[str, float]] = {}
    reasons: dict[str, str] = {}
    for e in estimators:
        why, got = _one(e, log_w, rollout, row, col, rows, width, empty)
        if why is not None:
            reasons[label(e)] = why
        if got:
            numbers[label(e)] = got
    return numbers, reasons
