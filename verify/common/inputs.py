"""What every command reads and writes first: the contract, the evidence files it is given or
names, and the plan of its output files (``verify.common.outputs``), each problem written as one
line."""

from __future__ import annotations

import os
import stat

__all__ = [
    "declared_evidence_problem",
    "evidence_problem",
    "given_evidence_problem",
    "load_contract",
    "prepare_outputs",
    "run_inputs",
]


def evidence_problem(path: str, shown: str) -> str | None:
    """Why the evidence file ``path`` cannot be read, when it is no regular file (a FIFO
    would block the run); a missing file is left to the evidence reader to name."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    from kernel_contracts.contracts import file_kind

    return f"{shown}: is {file_kind(mode)}, not a log file"


def given_evidence_problem(paths) -> str | None:
    """The first problem of the ``--evidence`` files ``paths`` (``evidence_problem``), or
    ``None``."""
    for path in paths:
        problem = evidence_problem(path, f"--evidence {path}")
        if problem:
            return problem
    return None


def _declared_evidence(contract) -> tuple[str, str] | None:
    """The contract's own ``evidence.logprobs`` path, and how messages name it."""
    declared = contract.evidence.logprobs
    if declared is None:
        return None
    prefix = contract.source.prefix("evidence.logprobs.path")
    return declared.path, f"{prefix}evidence.logprobs.path: {declared.path}"


def declared_evidence_problem(contract, plan) -> str | None:
    """What is wrong with the evidence file the contract itself names (unreadable, or one of
    the outputs), as one line; ``None`` when it names none or nothing is wrong."""
    from kernel_contracts.verify.common import outputs

    declared = _declared_evidence(contract)
    if not declared:
        return None
    problem = evidence_problem(*declared)
    try:
        outputs.refuse_inputs(plan, [("an evidence file", declared[0])])
    except outputs.OutputError as err:
        problem = problem or f"verify: {err}"
    return problem


def prepare_outputs(named, inputs, stderr):
    """The output plan of a command writing the ``named`` (label, path) targets and reading the
    ``inputs`` (label, path); ``None`` (the reason written to ``stderr``) when a target is
    unusable."""
    from kernel_contracts.verify.common import outputs

    try:
        return outputs.prepare(named, inputs)
    except outputs.OutputError as err:
        stderr.write(f"verify: {err}\n")
        return None


def run_inputs(args) -> list[tuple[str, str]]:
    """What a verification run reads: the contract and every ``--evidence`` file."""
    return [("the contract", args.contract)] + [("an evidence file", e) for e in args.evidence]


def load_contract(path: str, stderr):
    """The contract at ``path``, or ``None`` with every problem written to ``stderr``."""
    from kernel_contracts import contracts

    try:
        return contracts.load(path)
    except contracts.ContractError as err:
        stderr.write(f"{err}\n")
        return None
