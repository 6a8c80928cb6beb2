"""What a contract's guarantees ask of a training framework, before any framework is named.

A ``pg_bias`` guarantee with an estimator other than ``plain`` asks for that estimator's
correction (``tis``, ``mis``, ``icepop``, ``dppo_tv``, ``kl_reject``, ..., with the parameters it
was proved for: cap, band, threshold, clip range, ``kl_reject``'s criteria and ``vespo``'s
gamma pairs); a
``clip_budget`` guarantee asks for the PPO clip range ε it was proved for. Every other
guarantee (the plain estimator included: it corrects nothing) drives no setting. Parameters
are kept as the exact rationals the contract wrote (``contracts.exact``), and written back as
the shortest decimal that reads as the same double (``number``).

A framework's keys were read from its code over a range of its releases and at one commit of
its main branch; ``check_version`` accepts a release in that range (``X.Y`` or ``X.Y.Z``) or
that commit (``main@<commit>``), and returns the release for ``plan`` to check the estimators
that a framework has only from some release on (``Framework.since``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from kernel_contracts.contracts import Contract, Guarantee, KernelContractsError, exact
from kernel_contracts.contracts.fields import ESTIMATORS

__all__ = [
    "DRIVING",
    "MAIN",
    "ExportError",
    "Framework",
    "NoCounterpart",
    "Request",
    "Value",
    "check_version",
    "number",
    "parse_version",
    "request_of",
    "requests_of",
]

# every estimator but plain (contracts.fields.ESTIMATORS), and the one non-estimator
DRIVING = (*(name for name in ESTIMATORS if name != "plain"), "clip_budget")

# what a setting holds; a Fraction is written as a number with a point, an int without one
Value = str | bool | int | Fraction | None
# the release ``check_version`` returns for a checked main-branch commit: newer than any release
MAIN = (sys.maxsize, 0)


class ExportError(KernelContractsError, ValueError):
    """An export that cannot be made; ``str`` is the message and ``code`` the exit code."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class NoCounterpart(KernelContractsError, ValueError):
    """A framework has no setting that carries out a request exactly; ``str`` says why."""


@dataclass(frozen=True)
class Request:
    """One guarantee's correction: the estimator (or ``clip_budget``) and its parameters."""

    guarantee: str
    what: str
    cap: Fraction | None = None
    band: tuple[Fraction, Fraction] | None = None
    threshold: Fraction | None = None
    clip_epsilon: Fraction | None = None
    reject: str | None = None  # kl_reject's criteria and thresholds (contracts.rejection)
    reject_threshold: str | None = None
    gamma: tuple[Fraction, Fraction, Fraction, Fraction] | None = None  # vespo's (k, λ) pairs
    cov_fraction: Fraction | None = None  # clip_cov's and kl_cov's share of tokens
    cov_band: tuple[Fraction, Fraction] | None = None  # clip_cov's covariance band
    kl_coef: Fraction | None = None  # kl_cov's κ

    @property
    def summary(self) -> str:
        """E.g. ``pg_bias, estimator tis, cap 2``: the guarantee as messages name it."""
        parts = [] if self.clip_epsilon is None else [f"clip_epsilon {number(self.clip_epsilon)}"]
        if self.what == "clip_budget":
            return ", ".join(["clip_budget", *parts])
        if self.cap is not None:
            parts.append(f"cap {number(self.cap)}")
        if self.band is not None:
            parts.append(f"band [{number(self.band[0])}, {number(self.band[1])}]")
        if self.threshold is not None:
            parts.append(f"threshold {number(self.threshold)}")
        if self.reject is not None:
            parts.append(f"reject {self.reject}, reject_threshold {self.reject_threshold}")
        if self.gamma is not None:
            parts.append("gamma [" + ", ".join(number(v) for v in self.gamma) + "]")
        if self.cov_fraction is not None:
            parts.append(f"cov_fraction {number(self.cov_fraction)}")
        if self.cov_band is not None:
            parts.append(f"cov_band [{number(self.cov_band[0])}, {number(self.cov_band[1])}]")
        if self.kl_coef is not None:
            parts.append(f"kl_coef {number(self.kl_coef)}")
        return ", ".join([f"pg_bias, estimator {self.what}", *parts])


@dataclass(frozen=True)
class Framework:
    """A training framework's spelling of the corrections: ``settings`` maps a request to
    ``(key, value)`` pairs or raises ``NoCounterpart``; ``formats`` are the output formats it
    reads, the first the default; ``source`` names the code the keys were taken from;
    ``versions`` is the range of the framework's releases, ``("X.Y", "X.Y")`` with both ends
    included (released versions only), and ``main`` the commit (40 hex digits) of its main
    branch, whose code
    was read for every key and value the mapping writes; ``since`` maps an estimator the
    framework carries out only from some release on to that release and what earlier ones
    lack; ``ratio_clamp`` maps an estimator whose weight the framework computes from the
    log-ratio clamped to ±R, passing no gradient beyond, to R: it is exported only where the
    guarantee's premises prove |log w| ≤ R (``plan.prove``; ``beyond_clamp`` says why, for the
    messages); ``sequence_clamp`` does the same
    for a sequence weight W computed from the sum of a sequence's log-ratios clamped to ±R,
    which the clamp leaves alone where every one of the at most L tokens has |log w| ≤ R/L
    (L the guarantee's horizon; a sequence mask whose lower end lo ≥ 2.1e−9 > e^−20 keeps no W
    the clamp raises, and needs nothing); ``features`` maps an estimator
    to the framework's own names for its nearest feature, for the docs table
    (``verify.pipeline.export.table``)."""

    name: str
    source: str
    formats: tuple[str, ...]
    settings: Callable[[Request], tuple[tuple[str, Value], ...]]
    versions: tuple[str, str]
    main: str
    since: Mapping[str, tuple[str, str]]
    ratio_clamp: Mapping[str, Fraction]
    features: Mapping[str, str]
    sequence_clamp: Mapping[str, Fraction] = field(default_factory=dict)
    # what happens to a weight beyond ±R in ``ratio_clamp`` ({bound}: R), for the messages
    beyond_clamp: str = (
        "the log-ratio clamped to [-{bound}, {bound}] (a weight beyond it is e^±20 or gets no "
        "gradient)"
    )

    @property
    def checked(self) -> str:
        """E.g. ``verl 0.8 to 0.9 and main@1dda039b``: what the keys were checked against."""
        return f"{self.name} {self.versions[0]} to {self.versions[1]} and main@{self.main[:8]}"


_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?")
_MAIN = re.compile(r"main@([0-9a-f]{7,40})")


def parse_version(text: str) -> tuple[int, int]:
    """``(X, Y)`` of a release written ``X.Y`` or ``X.Y.Z`` (the patch level is ignored);
    raises ``ExportError`` (exit 2) for anything else."""
    m = _VERSION.fullmatch(text)
    if m is None:
        raise ExportError(
            f"--check-version {text}: not a release number; write it as X.Y (e.g. 0.9) or "
            "X.Y.Z, or main@COMMIT for the checked commit of the main branch"
        )
    return int(m.group(1)), int(m.group(2))


def check_version(framework: Framework, text: str) -> tuple[int, int]:
    """The release ``text`` names (``MAIN`` for the checked main-branch commit, written
    ``main@<commit>``, 7 to 40 hex digits); raises ``ExportError`` (exit 2) unless it lies
    in ``framework.versions`` or names ``framework.main``."""
    m = _MAIN.fullmatch(text)
    if m is not None:
        given = m.group(1)
        if framework.main.startswith(given):
            return MAIN
    else:
        low, high = (parse_version(v) for v in framework.versions)
        if low <= parse_version(text) <= high:
            return parse_version(text)
    raise ExportError(
        f"--check-version {text}: the {framework.name} settings were checked against "
        f"{framework.checked} only (their keys, values and meaning); nothing is written "
        f"for {framework.name} {text}"
    )


def number(v: Fraction | float) -> str:
    """The shortest decimal that reads back as the double nearest ``v`` (Python's ``repr``)."""
    return repr(float(v))


def _exact(v) -> Fraction | None:
    return None if v is None else exact(v)


def request_of(g: Guarantee) -> Request | None:
    """The correction guarantee ``g`` asks for, or ``None`` when it drives no setting."""
    if g.quantity == "clip_budget":
        return Request(g.id, "clip_budget", clip_epsilon=_exact(g.clip_epsilon))
    if g.quantity != "pg_bias" or g.estimator == "plain":
        return None
    band = getattr(g, "band", None)
    gamma = getattr(g, "gamma", None)
    cov_band = getattr(g, "cov_band", None)
    return Request(
        g.id,
        g.estimator,
        cap=_exact(g.cap),
        band=None if band is None else (exact(band[0]), exact(band[1])),
        threshold=_exact(getattr(g, "threshold", None)),
        clip_epsilon=_exact(g.clip_epsilon),
        reject=g.reject,
        reject_threshold=g.reject_threshold,
        gamma=None if gamma is None else tuple(exact(v) for v in gamma),
        cov_fraction=_exact(getattr(g, "cov_fraction", None)),
        cov_band=None if cov_band is None else (exact(cov_band[0]), exact(cov_band[1])),
        kl_coef=_exact(getattr(g, "kl_coef", None)),
    )


def requests_of(contract: Contract, wanted: tuple[str, ...] = ()) -> tuple[Request, ...]:
    """The requests of ``contract``'s guarantees, in contract order; only those named in
    ``wanted`` when it is not empty. Raises ``ExportError`` (exit 2) for a wanted id that is
    no guarantee of the contract or drives no setting."""
    by_id = {g.id: g for g in contract.guarantees}
    for gid in wanted:
        g = by_id.get(gid)
        if g is None:
            known = ", ".join(by_id) or "none"
            raise ExportError(f"--guarantee {gid}: the contract has no such guarantee (its "
                              f"guarantees: {known})")  # fmt: skip
        if request_of(g) is None:
            what = g.quantity
            if g.quantity == "pg_bias":
                what += f" with estimator {g.estimator}"
            raise ExportError(
                f"--guarantee {gid}: a {what} guarantee drives no framework setting (only "
                "pg_bias with an estimator other than plain, and clip_budget, do)"
            )
    chosen = [g for g in contract.guarantees if not wanted or g.id in wanted]
    return tuple(r for r in map(request_of, chosen) if r is not None)
