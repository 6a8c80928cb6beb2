"""The typed, immutable records of a kernel contract (DSL version 1).

Every record is a frozen dataclass; sequences are tuples and mappings are read-only, so a
``Contract`` can be hashed, shared between threads and never changes after validation.
Numbers keep the text the user wrote (``Threshold``) so proofs can use the exact rational.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Literal

from kernel_contracts.contracts import fields as F

__all__ = [
    "MX_BLOCK",
    "AccumulatorSpec",
    "AttentionSpec",
    "Contract",
    "EmulateEvidence",
    "EpilogueSpec",
    "EscalationRule",
    "Evidence",
    "Guarantee",
    "IntAccumulatorSpec",
    "KernelPair",
    "KernelSpec",
    "LogprobsEvidence",
    "MatmulSpec",
    "NumericalClause",
    "ObservabilityClause",
    "Policy",
    "PromotionStage",
    "RuntimeClause",
    "Scaling",
    "Slice",
    "Source",
    "StatisticalClause",
    "exact",
]

# each Literal below is built from the DSL's one list of its values (contracts.fields)
Rounding = Literal[F.ROUNDINGS]
ScalingKind = Literal["per_tensor", "per_row", "block", "mx"]
Format = Literal[F.FORMATS]
InputFormat = Literal[F.INPUT_FORMATS]
ScaleFormat = Literal[F.SCALE_FORMATS]
EpilogueOrder = Literal[F.EPILOGUE_ORDERS]
NumericalMetric = Literal[F.NUMERICAL_METRICS]
StatisticalMetric = Literal[F.STATISTICAL_METRICS]
Statistic = Literal[F.STATISTICS]
Quantity = Literal[F.QUANTITIES]
Estimator = Literal[F.ESTIMATORS]
Severity = Literal[F.SEVERITIES]
Action = Literal[F.ACTIONS]
Stage = Literal[F.STAGES]
EvidenceFormat = Literal[F.EVIDENCE_FORMATS]
LogFileFormat = Literal[F.LOG_FILE_FORMATS]


def exact(x: float | int) -> Fraction:
    """The rational a user wrote for ``x``: the shortest decimal that round-trips to ``x``."""
    if isinstance(x, bool):
        raise TypeError("booleans are not numbers here")
    if isinstance(x, int):
        return Fraction(x)
    return Fraction(repr(float(x)))


@dataclass(frozen=True)
class Source:
    """Where a contract came from: its path, raw bytes' sha256 and canonical JSON form."""

    path: str
    sha256: str
    canonical: str
    # key path ("numerical[0].max") -> (line, column), both 1-based; derived from the bytes
    # (so left out of equality and hashing: a read-only mapping has no hash)
    locations: MappingProxyType = field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False
    )

    def where(self, key_path: str) -> tuple[int, int] | None:
        """The (line, column) of ``key_path`` or of its nearest located parent."""
        path = key_path
        while path:
            if path in self.locations:
                return self.locations[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return None

    def prefix(self, key_path: str) -> str:
        """``"path:line:col: "`` of ``key_path`` (or of its nearest located parent) for a
        message about it; ``""`` where no position is known."""
        at = self.where(key_path)
        return f"{self.path}:{at[0]}:{at[1]}: " if at is not None else ""


@dataclass(frozen=True)
class Policy:
    """How logits become tokens."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    logprobs: Literal[F.LOGPROBS] = "full_vocab"
    # None: not declared; a log's token ids are then only checked to be ≥ 0, and the evidence
    # says the largest one it saw (there is no default vocabulary: a wrong one refuses every line)
    vocab_size: int | None = field(default=None, metadata={"omit_if_none": True})
    max_new_tokens: int = 512

    @property
    def truncated(self) -> bool:
        """True when sampling keeps only part of the vocabulary."""
        return self.top_p < 1.0 or self.top_k > 0


@dataclass(frozen=True)
class AccumulatorSpec:
    """An accumulator with ``mantissa_bits`` explicit bits (float32 is 23) and a rounding mode."""

    mantissa_bits: int = 23
    rounding: Rounding = "nearest_even"


@dataclass(frozen=True)
class IntAccumulatorSpec:
    """An integer accumulator: exact products and sums, two's-complement wrap past its range."""

    dtype: Literal[F.INT_ACCUMULATORS] = "int32"


@dataclass(frozen=True)
class EpilogueSpec:
    """How an int8 matmul turns its int32 accumulator into the output (``kernels._matmul``).

    ``scales``: the dtype the per-token and per-channel scales are stored in; ``order``: which
    scale multiplies first (``acc_sx_sw`` = (acc·s_x)·s_w, ``acc_sw_sx`` = (acc·s_w)·s_x,
    ``acc_sxsw`` = acc·(s_x·s_w)), ``None`` when ``fused`` (one rounding of the exact product,
    so no order); ``rounding``: of every epilogue rounding and of the output.
    """

    scales: ScaleFormat = "float32"
    order: EpilogueOrder | None = field(default="acc_sw_sx", metadata={"omit_if_none": True})
    fused: bool = False
    rounding: Rounding = "nearest_even"


MX_BLOCK = 32  # the block of OCP Microscaling (MX) formats, the only MX block the DSL offers
_SCALING = re.compile(r"(per_tensor|per_row)|(block|mx):([1-9][0-9]*)")


class Scaling(str):
    """A matmul's scale granularity, parsed once: what ``MatmulSpec.scaling`` holds.

    ``kind``: ``per_tensor`` (one scale), ``per_row`` (one per row of the left operand and per
    column of the right one), ``block`` (one per run of ``block`` elements along K) or ``mx``
    (as ``block``, with power-of-two E8M0 scales). ``block`` is ``None`` for the first two.
    ``Scaling("block", 128)`` builds one from its parts, ``Scaling.parse("block:128")`` from
    its DSL spelling. The record is that spelling (a ``str``), so it compares, hashes and is
    written exactly as a contract writes it: ``Scaling.parse(s) == s`` and ``s == "block:128"``.
    The record and the emulated kernels take any MX block; a contract may only name ``mx:32``
    (``MX_BLOCK``).
    """

    __slots__ = ("_block", "_kind")

    def __new__(cls, kind: ScalingKind, block: int | None = None) -> Scaling:
        blocked = kind in ("block", "mx")
        if kind not in ("per_tensor", "per_row", "block", "mx") or (
            blocked != (isinstance(block, int) and not isinstance(block, bool) and block >= 1)
        ):
            raise ValueError(f"no scaling {kind!r} with block {block!r}")
        self = super().__new__(cls, f"{kind}:{block}" if blocked else kind)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_block", block if blocked else None)
        return self

    @classmethod
    def parse(cls, text: str) -> Scaling:
        """``per_tensor``, ``per_row``, ``block:N`` or ``mx:N`` (N a positive integer written
        without leading zeros) as a record; a ``ValueError`` quoting ``text`` otherwise."""
        if isinstance(text, Scaling):
            return text
        if not isinstance(text, str):
            raise ValueError(f"scaling must be a string, got {text!r}")
        return _parse_scaling(text)

    @property
    def kind(self) -> ScalingKind:
        """``per_tensor``, ``per_row``, ``block`` or ``mx``."""
        return self._kind

    @property
    def block(self) -> int | None:
        """The run length along K of one scale (``block`` and ``mx``); ``None`` otherwise."""
        return self._block

    @property
    def varies_along_k(self) -> bool:
        """True when the scale changes along the reduction axis (block and MX scaling)."""
        return self._kind in ("block", "mx")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Scaling is immutable: cannot set {name!r}")

    def __reduce__(self):
        return Scaling, (self._kind, self._block)

    def __str__(self) -> str:
        return str.__str__(self)


@functools.lru_cache(maxsize=256)
def _parse_scaling(text: str) -> Scaling:
    m = _SCALING.fullmatch(text)
    if m is None:
        raise ValueError(
            f"scaling {text!r} is not one of per_tensor, per_row, block:N, mx:N "
            "(N a positive integer)"
        )
    if m[1] is not None:
        return Scaling(m[1])
    return Scaling(m[2], int(m[3]))


_PER_TENSOR = Scaling("per_tensor")


@dataclass(frozen=True)
class MatmulSpec:
    """The arithmetic of one emulated matmul (DESIGN §7)."""

    inputs: InputFormat = "float32"
    # parsed when the record is built; given as text (per_tensor | per_row | block:N | mx:32)
    # or as a Scaling, a ValueError when malformed
    scaling: Scaling = _PER_TENSOR
    accumulator: AccumulatorSpec | IntAccumulatorSpec = AccumulatorSpec()
    group: int = 1
    promote_every: int | None = None  # None: never promoted
    output: Format = "float32"
    # the longest reduction one accumulator sees (int8: what the exactness obligations cover)
    k_max: int | None = field(default=None, metadata={"omit_if_none": True})
    epilogue: EpilogueSpec | None = field(default=None, metadata={"omit_if_none": True})

    @property
    def is_int8(self) -> bool:
        """True for int8 inputs with an exact int32 accumulator and an explicit epilogue."""
        return self.inputs == "int8"

    def __post_init__(self) -> None:
        if type(self.scaling) is not Scaling:
            object.__setattr__(self, "scaling", Scaling.parse(self.scaling))


@dataclass(frozen=True)
class AttentionSpec:
    """How attention reads its keys and values."""

    kv_cache: Format = "float32"
    page_size: int = 16
    tiles: str = "full"  # full | adaptive | <int>


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: a named preset with any fields the contract overrode."""

    preset: str
    matmul: MatmulSpec
    attention: AttentionSpec
    batching: Literal["dynamic", "fixed"] = "fixed"
    provenance: str = ""


@dataclass(frozen=True)
class KernelPair:
    train: KernelSpec
    inference: KernelSpec


@dataclass(frozen=True)
class NumericalClause:
    """A per-token limit: ``metric`` ≤ ``max`` on every token of ``slice``."""

    id: str
    metric: NumericalMetric
    max: float
    slice: str = "all"


@dataclass(frozen=True)
class StatisticalClause:
    """A limit on the distribution of a per-token metric over each slice, at a confidence."""

    id: str
    metric: StatisticalMetric
    statistic: Statistic
    max: float
    confidence: float = 0.95
    min_samples: int = 1
    q: float | None = None  # quantile level, for statistic == "quantile"
    threshold: float | None = None  # for statistic == "exceed_rate": P(metric > threshold)
    slices: tuple[str, ...] = ("all",)


@dataclass(frozen=True)
class RuntimeClause:
    """The conditions under which the numerical and statistical clauses are claimed."""

    id: str
    batch_size: tuple[int, int] | None = None
    sequence_length: tuple[int, int] | None = None
    batch_invariant: bool | None = None
    kv_cache: Format | None = None
    hardware: str | None = None


@dataclass(frozen=True)
class ObservabilityClause:
    id: str
    log: tuple[str, ...]
    sample_rate: float = 1.0
    window_tokens: int = 100_000


@dataclass(frozen=True)
class Slice:
    """A named token subset; each range is [lo, hi] with ``None`` for unbounded."""

    name: str
    token_prob: tuple[float | None, float | None] | None = None
    position: tuple[int | None, int | None] | None = None
    entropy: tuple[float | None, float | None] | None = None
    margin: tuple[float | None, float | None] | None = None
    prompt: str | None = None  # regular expression over prompt ids / names


@dataclass(frozen=True)
class Guarantee:
    """A claim the thresholds must buy; each becomes a proof obligation."""

    id: str
    quantity: Quantity
    max: float
    from_: tuple[str, ...]
    scope: Literal["token", "sequence"] = "token"
    reward_range: tuple[float, float] | None = None
    score_norm: float | None = None
    advantage: float | None = None
    estimator: Estimator = "plain"
    cap: float | None = None
    clip_epsilon: float | None = None
    horizon: int | None = None  # overrides policy.max_new_tokens for sequence scope
    assume: tuple[str, ...] = ()
    # pg_bias estimator parameters added later (icepop/geo_mask band, tv_mask/kl_mask threshold)
    band: tuple[float, float] | None = field(default=None, metadata={"omit_if_none": True})
    threshold: float | None = field(default=None, metadata={"omit_if_none": True})
    # kl_reject's criteria and thresholds, in verl's spelling (contracts.rejection)
    reject: str | None = field(default=None, metadata={"omit_if_none": True})
    reject_threshold: str | None = field(default=None, metadata={"omit_if_none": True})
    # sapo's gate temperatures [τ_pos, τ_neg] (for A > 0 and A ≤ 0)
    temperatures: tuple[float, float] | None = field(default=None, metadata={"omit_if_none": True})
    # vespo's gamma weights [k_pos, λ_pos, k_neg, λ_neg] (for A ≥ 0 and A < 0)
    gamma: tuple[float, float, float, float] | None = field(
        default=None, metadata={"omit_if_none": True}
    )
    # clip_cov and kl_cov: the share ρ of the batch's tokens they pick, clip_cov's covariance
    # band [lb, ub] and kl_cov's penalty coefficient κ
    cov_fraction: float | None = field(default=None, metadata={"omit_if_none": True})
    cov_band: tuple[float, float] | None = field(default=None, metadata={"omit_if_none": True})
    kl_coef: float | None = field(default=None, metadata={"omit_if_none": True})


@dataclass(frozen=True)
class EscalationRule:
    clause: str
    severity: Severity
    action: Action
    status: tuple[str, ...] = ("violated",)


@dataclass(frozen=True)
class PromotionStage:
    name: Stage
    min_tokens: int = 0
    traffic: float | None = None


@dataclass(frozen=True)
class EmulateEvidence:
    """The model to emulate: a shipped checkpoint name, an entry point
    ``package.module:function`` with its ``params`` file (``kernels.model.user_model`` defines
    both), ``hf:FOLDER``, a Hugging Face checkpoint folder (``kernels.model.hf``), or a GGUF
    file (``gguf:FILE``, or ``gguf:package:DIST/FILE`` for one an installed package ships).
    ``prompts`` is a count, or, for a checkpoint, a text file of prompts, one a line. Paths are
    resolved against the contract's directory. ``chat_template`` (``True``, or ``None`` for
    off) renders each line of the prompt file as one user message through the GGUF file's chat
    template (``kernels.model.chat``)."""

    model: str = "tiny-lm"
    prompts: int | str = 64
    max_new_tokens: int = 64
    seed: int = 0
    params: str | None = field(default=None, metadata={"omit_if_none": True})
    chat_template: bool | None = field(default=None, metadata={"omit_if_none": True})


@dataclass(frozen=True)
class LogprobsEvidence:
    path: str
    format: EvidenceFormat = "generic"
    # None: the file name's ending chooses (.parquet/.pq, .arrow/.feather, else JSONL)
    file_format: LogFileFormat | None = field(default=None, metadata={"omit_if_none": True})


@dataclass(frozen=True)
class Evidence:
    emulate: EmulateEvidence | None = None
    logprobs: LogprobsEvidence | None = None


@dataclass(frozen=True)
class Contract:
    """A validated kernel contract C = (N, S, R, O, Π) with its guarantees."""

    version: int
    name: str
    policy: Policy
    kernels: KernelPair
    source: Source
    description: str = ""
    numerical: tuple[NumericalClause, ...] = ()
    statistical: tuple[StatisticalClause, ...] = ()
    runtime: tuple[RuntimeClause, ...] = ()
    observability: tuple[ObservabilityClause, ...] = ()
    slices: tuple[Slice, ...] = ()
    guarantees: tuple[Guarantee, ...] = ()
    escalation: tuple[EscalationRule, ...] = ()
    promotion: tuple[PromotionStage, ...] = ()
    evidence: Evidence = Evidence()

    def clause(self, clause_id: str):
        """The numerical, statistical, runtime or observability clause with this id."""
        for family in (self.numerical, self.statistical, self.runtime, self.observability):
            for c in family:
                if c.id == clause_id:
                    return c
        raise KeyError(clause_id)

    def guarantee(self, guarantee_id: str) -> Guarantee:
        for g in self.guarantees:
            if g.id == guarantee_id:
                return g
        raise KeyError(guarantee_id)

    def slice(self, name: str) -> Slice:
        if name == "all":
            return Slice(name="all")
        for s in self.slices:
            if s.name == name:
                return s
        raise KeyError(name)
