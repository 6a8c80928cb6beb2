"""``python -m verify CONTRACT.yaml --stage STAGE --promotion-dir DIR [--traffic SHARE] ...``
and ``python -m verify check RECORD.json``.

Running a stage: the contract must declare it; the record of the declared stage before it must
be in ``DIR``, re-check with its report and its whole chain
(``verify.pipeline.promotion.chain.link``: a record whose report ``verify check`` refuses is
refused), be made for this very contract file
and have passed. Then the contract is verified as ``python -m verify`` does (``--evidence``,
``--json``, ``--markdown``, ``--html``, ``--solver-budget`` and ``--timeout-ms`` as there),
and two files are written together, all or nothing (``verify.common.outputs``; the run itself is
``verify.proving.command.verify_main``): the report ``DIR/STAGE.report.json``
and the record ``DIR/STAGE.json`` bound to it.

``DIR`` is created (with its missing parents) when it does not exist.

Exit codes: 0 the stage passed; 1 the stage ran and its requirements are not met (a record
with ``passed: false`` is written: it blocks the next stage); 2 refused, nothing written: a
usage error, a stage the contract does not declare, a missing previous record (a skipped
stage), a stale one (made for another contract, or its report or its own previous record
changed since), one that does not re-check (its report included: ``verify check`` refuses
the report), a previous stage that did not pass, a record that is not valid JSON or holds a
duplicate key, or any input ``python -m verify`` itself refuses.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from kernel_contracts.verify.common.arguments import traffic_share
from kernel_contracts.verify.pipeline.promotion.chain import (
    is_record,
    link,
    read_record,
    record_differences,
)
from kernel_contracts.verify.pipeline.promotion.record import (
    PromotionError,
    build_record,
    dumps_record,
    previous_stage,
    record_path,
    report_path,
    sha256_text,
)

__all__ = ["check_record_main", "is_record", "stage_main", "traffic_share"]

_NO_TRAFFIC = ("offline_ci", "full")


def _usage(args) -> str | None:
    if args.stage is None:
        return "--promotion-dir and --traffic go with --stage STAGE"
    if args.promotion_dir is None:
        return f"--stage {args.stage} needs --promotion-dir DIR (where stage records are kept)"
    if args.traffic is not None and args.stage in _NO_TRAFFIC:
        return f"--traffic applies to the shadow and canary stages, not {args.stage}"
    if os.path.lexists(args.promotion_dir) and not os.path.isdir(args.promotion_dir):
        return f"--promotion-dir {args.promotion_dir}: not a directory"
    return None


def _missing(path: str) -> list[str]:
    """The directories of ``path`` that do not exist yet, outermost first."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing[::-1]


def _stage_problem(contract, args) -> tuple[str | None, tuple]:
    """Why the stage cannot run (one line), else the link to the previous record and the
    clause keys held up to it."""
    try:
        previous = previous_stage(contract, args.stage)
    except PromotionError as err:
        return str(err), (None, [])
    need = next(s for s in contract.promotion if s.name == args.stage).traffic
    if need is not None and args.traffic is None:
        return (
            f"stage {args.stage} requires a traffic share of at least {need:g}: give "
            "--traffic SHARE, the share of production traffic its evidence comes from"
        ), (None, [])
    if previous is None:
        return None, (None, [])
    try:
        return None, link(args.promotion_dir, previous, contract.source.sha256)
    except PromotionError as err:
        return str(err), (None, [])


def _lines(record: dict, path: str) -> str:
    out = [f"{c['requirement']:<14} {'met' if c['met'] else 'NOT MET':<8} {c['detail']}"
           for c in record["checks"]]  # fmt: skip
    verdict = "passed" if record["passed"] else "not passed"
    out.append(f"promotion: {record['stage']} {verdict} (record {path})")
    return "\n".join(out) + "\n"


class _Stage:
    """A promotion stage as ``verify.proving.command.verify_main`` runs it."""

    def __init__(self, args):
        self.args = args
        self.previous, self.earlier, self.record = None, [], None
        self.written, self.made = False, []

    def usage(self) -> str | None:
        problem = _usage(self.args)
        if problem:
            return problem
        missing = _missing(self.args.promotion_dir)
        try:  # a missing directory (and its missing parents) is made, and unmade if unused
            os.makedirs(self.args.promotion_dir, exist_ok=True)
        except OSError as err:
            return f"--promotion-dir {self.args.promotion_dir}: cannot create it ({err.strerror})"
        self.made = missing
        return None

    def abandon(self) -> None:
        for path in reversed(self.made):  # innermost first; a directory not empty stays
            try:
                os.rmdir(path)
            except OSError:
                break
        self.made = []

    def targets(self) -> list[tuple[str, str]]:
        self.record_file = record_path(self.args.promotion_dir, self.args.stage)
        self.report_file = report_path(self.args.promotion_dir, self.args.stage)
        return [("the stage report", self.report_file), ("the stage record", self.record_file)]

    def refuse(self, contract) -> str | None:
        problem, (self.previous, self.earlier) = _stage_problem(contract, self.args)
        return f"verify: --stage {self.args.stage}: {problem}" if problem else None

    def texts(self, contract, report_text: str) -> dict[str, str]:
        from kernel_contracts.verify.proving import runner as run

        self.record = build_record(
            contract,
            self.args.stage,
            json.loads(report_text),
            os.path.basename(self.report_file),
            sha256_text(report_text),
            self.args.traffic,
            self.previous,
            earlier=self.earlier,
            toolkit=run.toolkit_version(),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        return {"the stage report": report_text, "the stage record": dumps_record(self.record)}

    def finish(self, stdout) -> int:
        stdout.write(_lines(self.record, self.record_file))
        return 0 if self.record["passed"] else 1


def stage_main(args, stdout, stderr, t_start: float) -> int:
    """Run one promotion stage (see the module docstring); returns the exit code."""
    from kernel_contracts.verify.proving.command import verify_main

    return verify_main(args, stdout, stderr, t_start, stage=_Stage(args))


def check_record_main(path: str, *, stdout, stderr) -> int:
    """``verify check RECORD.json``: 0 the record and its chain re-check, 1 any difference,
    2 not a readable record."""
    try:
        record, _ = read_record(path)
    except PromotionError as err:
        stderr.write(f"{err}\n")
        return 2
    directory = os.path.dirname(os.path.abspath(path))
    differences = record_differences(record, directory)
    for d in differences:
        stdout.write(f"DIFFERENCE {d}\n")
    if differences:
        stdout.write(f"{path}: {len(differences)} difference(s)\n")
        return 1
    verdict = "passed" if record.get("passed") else "not passed"
    stdout.write(
        f"{path}: re-checked, all agree (stage {record['stage']}, {verdict}; the chain of "
        "records and every report re-checked)\n"
    )
    return 0
