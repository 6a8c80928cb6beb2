"""The verdict record of one evidence clause on one slice."""

from __future__ import annotations

from dataclasses import dataclass

from kernel_contracts.verify.common.status import Status

__all__ = ["ClauseResult"]


@dataclass(frozen=True)
class ClauseResult:
    """What measuring one clause on one slice found.

    ``bound`` is the quantity the verdict was decided on: for statistical clauses an upper
    confidence bound at ``confidence``; for numerical clauses the observed maximum. ``lower``
    is a statistical clause's lower confidence bound (what tells violated from inconclusive),
    and ``basis`` the values beyond ``samples`` and ``value`` that both bounds are computed
    from (an exceedance count, a sample variance, the ranks of the order statistics), so that
    ``verify check`` recomputes them; ``None`` and empty where there are none.
    """

    id: str
    family: str  # numerical | statistical | runtime | observability
    slice: str
    status: Status
    metric: str
    statistic: str  # max | quantile | mean | exceed_rate | check
    threshold: float | None
    samples: int = 0
    value: float | None = None  # point estimate (empirical statistic)
    bound: float | None = None
    confidence: float | None = None
    fingerprint: str = ""  # sha256 of the data the clause was measured on
    source: str = ""  # emulate:<model>/<preset> or the log file path
    reason: str = ""  # why skipped / inconclusive / violated, in one line
    lower: float | None = None  # lower confidence bound (statistical clauses)
    basis: tuple[tuple[str, object], ...] = ()  # (name, value) pairs: what the bounds rest on
