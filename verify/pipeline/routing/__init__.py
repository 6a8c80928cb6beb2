"""Routing: the contract acting inside a training loop, batch by batch.

``prepare(contract)`` settles once what every batch needs (the proved TIS cap, the guarantees'
verdicts); ``route(router, train_logprobs, inference_logprobs, response_mask)`` decides a batch
and returns an immutable ``RoutingDecision``: the clause verdicts, the escalation rule that
fired, and what its action asks of the loop (a token mask, capped importance weights, the
sequences to re-score, a halted ``PromotionState``). The array functions (``log_ratio``,
``exceeds``, ``capped_weights``, ``rows_with``) run in numpy or under ``jax.jit``.

Importing this package does not import JAX.
"""

from kernel_contracts.verify.pipeline.routing.arrays import (
    Batch,
    RoutingError,
    cap_below,
    capped_weights,
    check_batch,
    exceeds,
    log_ratio,
    rows_with,
)
from kernel_contracts.verify.pipeline.routing.prepare import Router, prepare, tis_guarantees
from kernel_contracts.verify.pipeline.routing.route import (
    PromotionState,
    RoutingDecision,
    halt,
    route,
    routing_json,
)

__all__ = [
    "Batch",
    "PromotionState",
    "Router",
    "RoutingDecision",
    "RoutingError",
    "cap_below",
    "capped_weights",
    "check_batch",
    "exceeds",
    "halt",
    "log_ratio",
    "prepare",
    "route",
    "routing_json",
    "rows_with",
    "tis_guarantees",
]
