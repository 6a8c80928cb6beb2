"""One batch routed: its clauses decided, the escalation policy Π applied, its actions carried out.

``route`` decides every numerical and statistical clause of the contract on the batch's response
tokens with the offline evaluation's own functions (the batch becomes a token table, then a
``Source`` through ``tables_source``, then ``numerical_result`` / ``statistical_result``), so a
batch gets the verdicts ``python -m verify`` would give a log of the same tokens. The verdicts,
with the guarantees' and the static runtime verdicts, go through
``verify.common.escalation.decide``: the first rule that fires, in contract order, is the decision
(its severity and action); every
rule that fires is carried out:

- ``mask_tokens``: ``token_mask`` is True on the tokens its clause flags (below);
- ``tis_correct``: ``weights`` = min(w, c) on every response token (0 on padding), w =
  π_train(y)/π_inf(y), with the cap c of the guarantee ``prepare`` found proved;
- ``route_to_train_kernel``: ``rescore`` is True for the sequences holding a flagged token;
- ``halt_promotion`` and ``rollback``: ``promotion`` is a new, halted ``PromotionState``;
- ``log`` and ``alert``: the record itself.

The tokens a rule's clause flags: for a numerical clause, the response tokens of its slice whose
metric is above ``max``; for a statistical clause, those above its ``threshold``
(``exceed_rate``) or ``max`` (other statistics), on the slices whose verdict fired the rule;
where the clause cannot be measured on the batch token by token (a full-vocabulary metric,
which sampled tokens at most bound from below, a slice on a column the batch lacks), and for
rules on guarantees, runtime or observability clauses, every response token: the batch as a
whole is implicated.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

import numpy as np

from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.escalation import Decision, decide, decision_json
from kernel_contracts.verify.common.status import Status, worst
from kernel_contracts.verify.pipeline.routing.arrays import (
    Batch,
    RoutingError,
    capped_weights,
    check_batch,
    exceeds,
    log_ratio,
    rows_with,
)
from kernel_contracts.verify.pipeline.routing.prepare import Router
from kernel_contracts.verify.proving.render.report import clause_json

__all__ = ["PromotionState", "RoutingDecision", "halt", "route", "routing_json"]


@dataclass(frozen=True)
class PromotionState:
    """Where promotion stands, as the loop carries it from batch to batch (never mutated:
    ``route`` and ``halt`` return a new one)."""

    stage: str | None = None
    halted: bool = False
    rollback: bool = False
    reason: str = ""


def halt(state: PromotionState, reason: str, *, rollback: bool = False) -> PromotionState:
    """``state`` halted (and marked for rollback) with ``reason``; the first reason is kept, and
    a state already so is returned as it is."""
    if state.halted and (state.rollback or not rollback):
        return state
    return dataclasses.replace(
        state,
        halted=True,
        rollback=state.rollback or rollback,
        reason=state.reason or reason,
    )


@dataclass(frozen=True, eq=False)
class RoutingDecision:
    """Everything one batch decided (compare two with ``routing_json``).

    Arrays are numpy (read-only) or JAX arrays, as the log-probs were given; each is ``None``
    unless its action fired.
    """

    clauses: tuple[ClauseResult, ...]
    escalation: tuple[Decision, ...]
    rule: int | None
    severity: str | None
    action: str | None
    actions: tuple[str, ...]
    token_mask: object | None
    weights: object | None
    cap: Fraction | None
    cap_guarantee: str | None
    rescore: object | None
    promotion: PromotionState
    tokens: int
    sequences: int
    fingerprint: str

    @property
    def status(self) -> Status:
        """The worst verdict of the batch's clauses."""
        return worst(c.status for c in self.clauses)

    @property
    def rescore_indices(self) -> tuple[int, ...]:
        """The sequences to re-score with the training kernel, in batch order."""
        if self.rescore is None:
            return ()
        return tuple(int(i) for i in np.flatnonzero(np.asarray(self.rescore)))


def _columns(batch: Batch, log_w: np.ndarray) -> dict[str, np.ndarray]:
    """The grid columns the slices and clauses read, flattened (padding included)."""
    from kernel_contracts.evidence.table import from_logprobs

    b, t = batch.shape
    prompt = np.repeat(np.arange(b, dtype=np.int32), t)
    return from_logprobs(log_w.ravel(), batch.train.ravel(), batch.positions.ravel(), prompt)


def _names(batch: Batch) -> tuple[str, ...]:
    return batch.prompts if batch.prompts is not None else tuple(map(str, range(batch.shape[0])))


def _table(batch: Batch, columns: dict[str, np.ndarray]):
    from kernel_contracts.evidence.logs import LogTable

    keep = batch.mask.ravel()
    b, t = batch.shape
    table = {
        "train_logprob": batch.train.ravel()[keep],
        "rollout_logprob": batch.inference.ravel()[keep],
        "log_kept_mass": np.full(int(keep.sum()), np.nan),
        "token": np.zeros(int(keep.sum()), np.int64),
        "position": columns["position"][keep],
        "sequence": np.repeat(np.arange(b, dtype=np.int64), t)[keep],
        "line": np.repeat(np.arange(1, b + 1, dtype=np.int64), t)[keep],
        "prompt": columns["prompt"][keep],
    }
    h = hashlib.sha256()
    for name in ("train_logprob", "rollout_logprob", "position", "sequence"):
        h.update(name.encode() + b"\n" + np.ascontiguousarray(table[name]).tobytes())
    names = _names(batch)
    h.update("\x1f".join(names).encode())
    return LogTable(
        path="batch",
        format="arrays",
        sha256=h.hexdigest(),
        columns=MappingProxyType(table),
        prompt_names=names,
        lines=b,
        blank_lines=0,
        sequences=b,
        padding_tokens=int(keep.size - keep.sum()),
        malformed=(),
        malformed_count=0,
        mismatches=(),
        mismatch_count=0,
        unpaired=(),
        unpaired_count=0,
    )


def _flagged(router, rule, source, batch, columns, clauses) -> np.ndarray:
    """The response tokens rule ``rule``'s clause flags on this batch (see the module doc)."""
    from kernel_contracts.evidence.summary import select
    from kernel_contracts.evidence.table import clause_column, reading

    contract, mask = router.contract, batch.mask
    fired_on = {c.slice for c in clauses if c.id == rule.clause and c.status.label in rule.status}
    measured = {c.id: c for c in (*contract.numerical, *contract.statistical)}
    clause = measured.get(rule.clause)
    if clause is None:
        return mask
    family = "numerical" if clause in contract.numerical else "statistical"
    col = clause_column(family, clause.metric)
    if reading(source.kind, col) != "exact":  # not measured, or bounded below only: all
        return mask
    limit = clause.threshold if getattr(clause, "statistic", None) == "exceed_rate" else clause.max
    out = np.zeros_like(mask)
    for name in sorted(fired_on):
        if name in source.slice_skip:
            return mask
        keep = select(columns, contract.slice(name), prompt_names=_names(batch))
        where = mask & keep.reshape(mask.shape)
        out |= exceeds(columns[col].reshape(mask.shape), float(limit), where)
    return out


def _answer(x: np.ndarray | None, use_jax: bool):
    if x is None:
        return None
    if use_jax:
        import jax.numpy as jnp

        return jnp.asarray(x)
    x.setflags(write=False)
    return x


def route(
    router: Router,
    train_logprobs,
    inference_logprobs,
    response_mask,
    *,
    positions=None,
    prompts=None,
    promotion: PromotionState | None = None,
) -> RoutingDecision:
    """Decide one batch and carry out what Π asks (see the module docstring).

    ``train_logprobs``, ``inference_logprobs``: the sampled tokens' log-probs under K_train and
    K_inf, floating-point [batch, tokens]; ``response_mask``: boolean [batch, tokens], True on
    response tokens. ``positions``, ``prompts``: see ``check_batch``. ``promotion``: the state
    to carry on (default a fresh one). Raises ``RoutingError`` naming every bad argument.
    """
    from kernel_contracts.evidence.sources import tables_source
    from kernel_contracts.verify.decide.verdicts import numerical_result, statistical_result

    if not isinstance(router, Router):
        raise RoutingError([f"router: expected verify.pipeline.routing.prepare(contract), got "
                            f"{type(router).__name__}"])  # fmt: skip
    if promotion is not None and not isinstance(promotion, PromotionState):
        what = type(promotion).__name__
        raise RoutingError([f"promotion: expected a PromotionState, got {what}"])
    batch = check_batch(
        train_logprobs, inference_logprobs, response_mask, positions=positions, prompts=prompts
    )
    contract = router.contract
    if batch.prompts is None:
        named = [s.name for s in contract.slices if s.prompt is not None]
        used = {c.slice for c in contract.numerical} | {
            s for c in contract.statistical for s in c.slices
        }
        if any(n in used for n in named):
            raise RoutingError([f"prompts: slice {next(n for n in named if n in used)} selects "
                                "on the prompt: pass prompts=, one name per sequence"])  # fmt: skip
    log_w = log_ratio(batch.train, batch.inference)
    columns = _columns(batch, log_w)
    table = _table(batch, columns)
    source = tables_source(contract, [table])
    measured = [numerical_result(c, source) for c in contract.numerical]
    measured += [statistical_result(c, s, source) for c in contract.statistical for s in c.slices]
    clauses = (*measured, *router.static)
    escalation = decide(
        contract.escalation, [*router.obligations, *((c.id, c.status) for c in clauses)]
    )
    fired = [i for i, d in enumerate(escalation) if d.fired]
    actions = tuple(dict.fromkeys(escalation[i].action for i in fired))
    flagged = {}
    for action in ("mask_tokens", "route_to_train_kernel"):
        rules = [contract.escalation[i] for i in fired if escalation[i].action == action]
        if rules:
            flags = [_flagged(router, r, source, batch, columns, clauses) for r in rules]
            flagged[action] = np.logical_or.reduce(flags)
    weights = None
    if "tis_correct" in actions:
        if router.cap is None:  # prepare refuses a policy with tis_correct and no proved cap
            raise RoutingError(["tis_correct: this router was prepared without a TIS cap"])
        weights = capped_weights(log_w.astype(batch.dtype), batch.mask, router.cap)
    state = promotion if promotion is not None else PromotionState()
    for i in fired:
        d = escalation[i]
        if d.action in ("halt_promotion", "rollback"):
            why = f"rule {i} ({d.action}): {d.clause} {'/'.join(d.observed)}"
            state = halt(state, why, rollback=d.action == "rollback")
    rescore = flagged.get("route_to_train_kernel")
    first = escalation[fired[0]] if fired else None
    return RoutingDecision(
        clauses=clauses,
        escalation=escalation,
        rule=fired[0] if fired else None,
        severity=first.severity if first else None,
        action=first.action if first else None,
        actions=actions,
        token_mask=_answer(flagged.get("mask_tokens"), batch.jax),
        weights=_answer(weights, batch.jax),
        cap=router.cap if weights is not None else None,
        cap_guarantee=router.cap_guarantee if weights is not None else None,
        rescore=_answer(None if rescore is None else rows_with(rescore), batch.jax),
        promotion=state,
        tokens=table.tokens,
        sequences=table.sequences,
        fingerprint=f"sha256:{table.sha256}",
    )


def _list(x):
    return None if x is None else np.asarray(x).tolist()


def routing_json(d: RoutingDecision) -> dict:
    """The decision as JSON-ready data (arrays as nested lists, the cap as ``p/q``)."""
    from kernel_contracts.verify.proving.obligations import rational

    return {
        "status": d.status.label,
        "rule": d.rule,
        "severity": d.severity,
        "action": d.action,
        "actions": list(d.actions),
        "clauses": [clause_json(c) for c in d.clauses],
        "escalation": [decision_json(e) for e in d.escalation],
        "token_mask": _list(d.token_mask),
        "weights": _list(d.weights),
        "cap": None if d.cap is None else rational(d.cap),
        "cap_guarantee": d.cap_guarantee,
        "rescore": list(d.rescore_indices) if d.rescore is not None else None,
        "promotion": dataclasses.asdict(d.promotion),
        "tokens": d.tokens,
        "sequences": d.sequences,
        "fingerprint": d.fingerprint,
    }
