"""Contracts of policy-gradient guarantees written as DSL text, for the bound tests: a logit
drift premise N1 (its max is δ), an optional TV premise N2, a log-ratio premise N3, and one
``pg_bias`` guarantee per line given."""

from __future__ import annotations

from kernel_contracts import contracts

PG = "quantity: pg_bias, score_norm: 5, advantage: 1"


def head(*, name: str, delta: str = "0.05", L: int = 8, tv: str | None = None) -> str:
    """The contract up to its ``guarantees:`` line; responses of at most ``L`` tokens."""
    tv_clause = "" if tv is None else f"  - {{id: N2, metric: tv, max: {tv}}}\n"
    return (
        f"contract: 1\nname: {name}\n"
        f"policy: {{temperature: 1.0, max_new_tokens: {L}}}\n"
        "kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}\n"
        "numerical:\n"
        f"  - {{id: N1, metric: logit_drift, max: {delta}}}\n"
        f"{tv_clause}"
        "  - {id: N3, metric: log_ratio, max: 0.6}\n"
        "guarantees:\n"
    )


def pg_contract(
    guarantees: list[str], delta: str = "0.05", L: int = 8, *, name: str, tv: str | None = None
) -> contracts.Contract:
    """The contract with guarantees ``G0, G1, ...``, each ``PG`` followed by its line."""
    body = "".join(f"  - {{id: G{i}, {PG}, {g}}}\n" for i, g in enumerate(guarantees))
    return contracts.loads(head(name=name, delta=delta, L=L, tv=tv) + body, path="c.yaml")
