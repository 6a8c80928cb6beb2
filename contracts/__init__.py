"""contracts: the kernel-contract DSL (version 1), its schema, loading and validation."""

from contracts.errors import ContractError, Problem
from contracts.load import load, loads
from contracts.model import (
    AccumulatorSpec,
    AttentionSpec,
    Contract,
    EmulateEvidence,
    EscalationRule,
    Evidence,
    Guarantee,
    KernelPair,
    KernelSpec,
    LogprobsEvidence,
    MatmulSpec,
    NumericalClause,
    ObservabilityClause,
    Policy,
    PromotionStage,
    RuntimeClause,
    Slice,
    Source,
    StatisticalClause,
    exact,
)
from contracts.presets import PRESETS, preset
from contracts.schema import json_schema

__all__ = [
    "PRESETS",
    "AccumulatorSpec",
    "AttentionSpec",
    "Contract",
    "ContractError",
    "EmulateEvidence",
    "EscalationRule",
    "Evidence",
    "Guarantee",
    "KernelPair",
    "KernelSpec",
    "LogprobsEvidence",
    "MatmulSpec",
    "NumericalClause",
    "ObservabilityClause",
    "Policy",
    "Problem",
    "PromotionStage",
    "RuntimeClause",
    "Slice",
    "Source",
    "StatisticalClause",
    "exact",
    "json_schema",
    "load",
    "loads",
    "preset",
]
