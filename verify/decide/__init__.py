"""Evidence clauses: measure the contract's numerical and statistical clauses and decide them.

Sources of evidence (DESIGN §4 ``evidence``): ``emulate`` runs the contract's model through both
kernels (``evidence.emulate``, ``kernels.emulation``), ``logprobs`` reads users' JSONL logs
(``evidence.logs``). Each source becomes per-slice, per-metric mergeable summaries
(``evidence.summary``), and every (clause, slice, source) gets one ``ClauseResult``:

- numerical: the maximum over every token of the slice ≤ ``max`` → held, else violated;
- statistical: the upper confidence bound (at ``confidence``) of the statistic ≤ ``max`` →
  held; its lower confidence bound > ``max`` → violated; fewer than ``min_samples`` tokens or
  an infinite bound → inconclusive, never held; otherwise inconclusive. ``max`` as a statistic
  is the sample maximum, decided empirically and said so;
- a metric the source cannot give (full-vocabulary metrics from sampled-token logs) → skipped
  with the reason.

Metric names: a numerical ``log_ratio`` limit bounds |log w|; ``kl`` is the larger of
KL(π‖π') and KL(π'‖π) per token, so a verdict holds for either direction.

Soundness rules: a non-finite measured value counts as the worst value of its metric; the mean
has a confidence bound only for metrics with a known range (``tv`` in [0, 1], ``top1_flip``
in {0, 1}); log-ratio clauses on processed log-probs under truncated sampling are inconclusive
unless the log carries log S per token (DESIGN §5). Tokens are treated as independent draws
(stated in the report); no correction is made for testing several clauses and slices.

JAX is imported only by the emulate source; logs-only and proofs-only runs never import it.
This room imports the ``common`` room only.
"""

from __future__ import annotations

import os
import sys

from kernel_contracts.evidence.sources import EvidenceError, emulate_sources, log_source
from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.decide.verdicts import numerical_result, statistical_result

__all__ = ["ASSUMPTIONS", "EvidenceError", "evaluate"]

ASSUMPTIONS = (
    "tokens are treated as independent draws from the measured distribution",
    "each clause and slice is bounded at its own confidence (no multiple-testing correction)",
)


def _log_paths(contract, paths) -> tuple[tuple[str, str | None, str, str | None], ...]:
    """``(path, format, where, file_format)`` of each log: a ``--evidence`` path is stored as
    its name's ending says, the contract's as its ``file_format`` says (else the same)."""
    declared = contract.evidence.logprobs
    if paths:
        fmt = declared.format if declared is not None else None
        return tuple((os.fspath(p), fmt, "--evidence ", None) for p in paths)
    if declared is None:
        return ()
    where = f"{contract.source.prefix('evidence.logprobs.path')}evidence.logprobs.path: "
    return ((declared.path, declared.format, where, declared.file_format),)


def evaluate(
    contract,
    *,
    paths: tuple[str, ...] = (),
    quiet: bool = True,
    stderr=None,
    trust_code: bool = False,
) -> tuple[tuple[ClauseResult, ...], dict]:
    """Measure the contract's evidence and decide every numerical and statistical clause.

    ``paths`` (``--evidence``) replace the contract's ``evidence.logprobs`` path and are read
    as shards of one log (their format: the contract's, else detected). ``trust_code`` is the
    user's consent to import the module a user model names (``--trust-code``). Returns one
    ``ClauseResult`` per (clause, slice, source) and the JSON-ready ``report["evidence"]``.
    Raises ``EvidenceError`` for unusable evidence, and for a user model without consent.
    """
    stream = None if quiet else (stderr if stderr is not None else sys.stderr)
    sources = []
    log_paths = _log_paths(contract, tuple(paths))
    if log_paths:
        sources.append(log_source(contract, log_paths, stream))
    if contract.evidence.emulate is not None:
        sources.extend(emulate_sources(contract, stream, trust_code=trust_code))
    results = []
    for source in sources:
        for clause in contract.numerical:
            results.append(numerical_result(clause, source))
        for clause in contract.statistical:
            for slice_name in clause.slices:
                results.append(statistical_result(clause, slice_name, source))
    report = {
        "sources": [s.info | {"label": s.label} for s in sources],
        "assumptions": list(ASSUMPTIONS) if sources else [],
    }
    swept = [s for s in sources if s.kind == "emulate" and s.info["sweep"]["swept"]]
    if swept:  # the settings of the runtime sweep, one source each
        report["sweep"] = [
            {"source": s.label}
            | {k: s.info[k] for k in ("batch_size", "sequence_length", "tokens")}
            for s in swept
        ]
    return tuple(results), report
