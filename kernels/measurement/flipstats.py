"""Does the logit margin predict a top-1 flip? ROC-AUC, a calibrated map and its Brier score.

At each position of a teacher-forced replay, kernel A's logits have a margin m (top-1 minus
top-2 logit) and kernel B's top-1 token either agrees with A's or flips. A small margin
should predict a flip. Two scores, computed here in NumPy:

* **ROC-AUC** of the score −m for the label "flip": the probability that a flipped position
  has a smaller margin than a position that did not flip, ties counting one half (the
  Mann–Whitney U statistic over the product of the class sizes, from average ranks). Any
  decreasing map of m has the same AUC, so it needs no fitting. ``None`` when either class is
  empty.
* **Brier score** of a probability forecast p: mean (p − flip)². The margin is not a
  probability, so it is mapped to one by a **logistic regression on the log margin**,
  p = σ(a + b·(log m − c)/s), with c and s the mean and standard deviation of log m on the fit
  split, fitted by Newton's method to the maximum of the log-likelihood with a ridge penalty
  λ/2·(a² + b²) (λ = 1: a standard-normal prior on the coefficients of the standardized
  feature, which keeps the fit finite when the classes separate). It is fitted on one split
  of the positions and scored on the other; the constant forecast of the fit split's flip rate
  is scored on the same split for comparison (a useful map has a smaller Brier score).
  Margins are floored at ``MARGIN_FLOOR`` before the log (a tie has margin 0).

References:
    Hanley & McNeil, "The meaning and use of the area under a ROC curve", Radiology 143
    (1982) (AUC = Mann–Whitney U / (n₁·n₀)). Brier, "Verification of forecasts expressed in
    terms of probability", Monthly Weather Review 78 (1950).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "MARGIN_FLOOR",
    "FlipPrediction",
    "Logistic",
    "brier",
    "fit_logistic",
    "predict_flips",
    "roc_auc",
]

MARGIN_FLOOR = 1e-12


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x`` with ties given their average rank."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], xs.size]
    avg = (starts + ends + 1) / 2.0  # mean of the ranks starts+1 .. ends
    ranks = np.empty(x.size, np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def roc_auc(scores, labels) -> float | None:
    """P(score of a positive > score of a negative) + ½·P(tie); ``None`` if a class is empty."""
    s = np.asarray(scores, np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise ValueError(f"scores and labels differ in shape: {s.shape} vs {y.shape}")
    if np.isnan(s).any():
        raise ValueError("scores hold NaN")
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return None
    u = _ranks(s)[y].sum() - pos * (pos + 1) / 2.0
    return float(u / (pos * neg))


def brier(prob, labels) -> float:
    """Mean squared difference between forecast probabilities and 0/1 outcomes."""
    p = np.asarray(prob, np.float64).ravel()
    y = np.asarray(labels).astype(np.float64).ravel()
    if p.shape != y.shape or p.size == 0:
        raise ValueError(f"need equal, non-empty shapes: {p.shape} vs {y.shape}")
    if ((p < 0) | (p > 1) | np.isnan(p)).any():
        raise ValueError("probabilities must lie in [0, 1]")
    return float(np.mean((p - y) ** 2))


class Logistic(NamedTuple):
    """p(x) = σ(intercept + slope·(x − center)/scale)."""

    intercept: float
    slope: float
    center: float
    scale: float

    def __call__(self, x) -> np.ndarray:
        t = self.intercept + self.slope * (np.asarray(x, np.float64) - self.center) / self.scale
        return 0.5 * (1.0 + np.tanh(0.5 * t))  # σ(t), without overflow


def fit_logistic(x, y, *, ridge: float = 1.0, iters: int = 100) -> Logistic:
    """The ridge-penalised maximum-likelihood logistic fit of 0/1 ``y`` on the feature ``x``
    (standardized inside; module docstring). Newton's method; the penalised log-likelihood is
    strictly concave, so it converges from 0."""
    x = np.asarray(x, np.float64).ravel()
    y = np.asarray(y).astype(np.float64).ravel()
    if x.shape != y.shape or x.size == 0 or not np.isfinite(x).all():
        raise ValueError("need equal, non-empty, finite x and y")
    if ridge <= 0:
        raise ValueError("ridge must be positive")
    center = float(x.mean())
    scale = float(x.std()) or 1.0
    design = np.stack([np.ones_like(x), (x - center) / scale], axis=1)
    beta = np.zeros(2)
    for _ in range(iters):
        t = design @ beta
        p = 0.5 * (1.0 + np.tanh(0.5 * t))
        grad = design.T @ (y - p) - ridge * beta
        hess = (design * (p * (1 - p))[:, None]).T @ design + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if np.max(np.abs(step)) < 1e-12:
            break
    return Logistic(float(beta[0]), float(beta[1]), center, scale)


class FlipPrediction(NamedTuple):
    """How well kernel A's margin predicts kernel B's top-1 flips (module docstring)."""

    positions: int
    flips: int
    auc: float | None  # of −margin, over every position
    brier: float | None  # of the logistic map on the test split (None: a split is empty)
    brier_constant: float | None  # of the fit split's flip rate, on the test split
    fit: Logistic | None
    fit_positions: int
    test_positions: int


def predict_flips(margin, flip, fit_split) -> FlipPrediction:
    """Score margins ``margin`` as predictors of ``flip``; ``fit_split`` marks the positions
    the logistic map is fitted on, the others are where its Brier score is measured."""
    m = np.asarray(margin, np.float64).ravel()
    f = np.asarray(flip).astype(bool).ravel()
    on = np.asarray(fit_split).astype(bool).ravel()
    if not (m.shape == f.shape == on.shape):
        raise ValueError(f"shapes differ: {m.shape}, {f.shape}, {on.shape}")
    if (m < 0).any() or np.isnan(m).any():
        raise ValueError("margins must be non-negative numbers")
    auc = roc_auc(-m, f)
    x = np.log(np.maximum(m, MARGIN_FLOOR))
    if not on.any() or on.all():
        return FlipPrediction(m.size, int(f.sum()), auc, None, None, None, int(on.sum()), 0)
    fit = fit_logistic(x[on], f[on])
    test = ~on
    rate = float(f[on].mean())
    return FlipPrediction(
        positions=m.size,
        flips=int(f.sum()),
        auc=auc,
        brier=brier(fit(x[test]), f[test]),
        brier_constant=brier(np.full(int(test.sum()), rate), f[test]),
        fit=fit,
        fit_positions=int(on.sum()),
        test_positions=int(test.sum()),
    )
