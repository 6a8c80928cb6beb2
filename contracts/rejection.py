"""Rejection by a KL estimator of the log ratio, in verl's spelling: the ``kl_reject`` estimator.

``reject`` lists criteria separated by commas, each ``LEVEL_kK``: ``token_k1``, ``token_k2``,
``token_k3``, ``seq_sum_k1/2/3``, ``seq_mean_k1/2/3``, ``seq_max_k2/3``. ``reject_threshold``
gives one threshold for all, or one per criterion, separated by commas (a number is one
threshold). With u = log w = log π_train(y) − log π_inf(y) per token:

- k1 = −u, kept inside a band: ``"a_b"`` keeps log a ≤ k1 ≤ log b (``"b"`` alone is a = 1/b),
  so 0 < a < 1 < b and the kept ratios are w ∈ [1/b, 1/a];
- k2 = u²/2 and k3 = e^u − 1 − u are at least 0, kept at most τ > 0;
- ``token`` judges each token; ``seq_sum``, ``seq_mean`` and ``seq_max`` judge a sequence by the
  sum, mean and maximum of its real tokens' values and keep or drop all of it.

A token is kept when every criterion keeps it (a chain is a conjunction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernel_contracts.contracts.checks import VALUE_CUTOFF, did_you_mean
from kernel_contracts.contracts.errors import KernelContractsError

__all__ = ["LEVELS", "Criterion", "RejectionError", "parse_rejection"]

LEVELS = ("token", "seq_sum", "seq_mean", "seq_max")
_NAMES = tuple(f"{lv}_k{k}" for lv in LEVELS for k in (1, 2, 3) if (lv, k) != ("seq_max", 1))


class RejectionError(KernelContractsError, ValueError):
    """A ``reject`` / ``reject_threshold`` pair that does not name valid criteria."""


@dataclass(frozen=True)
class Criterion:
    """One criterion: its level, its estimator k (1, 2 or 3) and its threshold: the band
    (a, b) of k1 = −log w, or the maximum τ of k2 or k3."""

    level: str
    k: int
    a: float | None  # k1 only
    b: float | None  # k1 only
    tau: float | None  # k2, k3

    @property
    def name(self) -> str:
        return f"{self.level}_k{self.k}"

    @property
    def ratio_band(self) -> tuple[float, float]:
        """k1's kept band on w (on W for seq_sum, on the geometric mean for seq_mean)."""
        return 1.0 / self.b, 1.0 / self.a


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RejectionError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise RejectionError(f"{what}: must be a positive number, got {text!r}")
    return value


def parse_rejection(reject: object, threshold: object) -> tuple[Criterion, ...]:
    """The criteria of a ``reject`` string and its ``reject_threshold`` (a string or a number).

    Raises RejectionError naming the criterion at fault: an unknown name, a repeated one, a
    threshold count that is neither 1 nor the number of criteria, a k1 band without
    0 < a < 1 < b, or a k2/k3 threshold that is not a positive number."""
    if not isinstance(reject, str) or not reject.strip():
        raise RejectionError(f"reject must be a comma-separated list of {', '.join(_NAMES)}")
    names = [n.strip() for n in reject.split(",")]
    unknown = [n for n in names if n not in _NAMES]
    if unknown:
        raise RejectionError(
            f"unknown criterion {unknown[0]!r}{did_you_mean(unknown[0], _NAMES, VALUE_CUTOFF)}; "
            f"expected one of {', '.join(_NAMES)}"
        )
    if len(set(names)) != len(names):
        raise RejectionError("each criterion may appear once")
    if isinstance(threshold, bool) or not isinstance(threshold, str | int | float):
        raise RejectionError("reject_threshold must be a number or a comma-separated string")
    specs = [t.strip() for t in str(threshold).split(",")]
    if len(specs) not in (1, len(names)):
        raise RejectionError(
            f"reject_threshold gives {len(specs)} thresholds for {len(names)} criteria "
            "(one for all, or one each)"
        )
    specs = specs * len(names) if len(specs) == 1 else specs
    out = []
    for name, spec in zip(names, specs, strict=True):
        level, k = name.rsplit("_k", 1)
        if k == "1":
            if "_" in spec:
                low, high = spec.split("_", 1)
                a, b = _number(low, name), _number(high, name)
            else:
                b = _number(spec, name)
                a = 1.0 / b
            if not a < 1 < b:
                raise RejectionError(f"{name}: the band a_b needs 0 < a < 1 < b, got {spec!r}")
            out.append(Criterion(level, 1, a, b, None))
        else:
            if "_" in spec:
                raise RejectionError(f"{name}: takes one maximum, not a band: {spec!r}")
            out.append(Criterion(level, int(k), None, None, _number(spec, name)))
    return tuple(out)
