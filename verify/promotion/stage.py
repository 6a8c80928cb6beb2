"""``python -m verify CONTRACT.yaml --stage STAGE --promotion-dir DIR [--traffic SHARE] ...``
and ``python -m verify check RECORD.json``.

Running a stage: the contract must declare it; the record of the declared stage before it must
be in ``DIR``, re-check with its report and its whole chain (``verify.promotion.chain.link``:
a record whose report ``verify check`` refuses is refused), be made for this very contract file
and have passed. Then the contract is verified as ``python -m verify`` does (``--evidence``,
``--json``, ``--markdown``, ``--html`` and ``--timeout-ms`` as there), and two files are
written together, all or nothing (``verify.cli.outputs``): the report ``DIR/STAGE.report.json``
and the record ``DIR/STAGE.json`` bound to it.

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
import math
import os
import time
from datetime import UTC, datetime

from verify.promotion.chain import is_record, link, read_record, record_differences
from verify.promotion.record import (
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


def traffic_share(text: str) -> float:
    """``--traffic``: a share of traffic in (0, 1]."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share in (0, 1]: {text}")
    return value


def _usage(args) -> str | None:
    if args.stage is None:
        return "--promotion-dir and --traffic go with --stage STAGE"
    if args.promotion_dir is None:
        return f"--stage {args.stage} needs --promotion-dir DIR (where stage records are kept)"
    if args.traffic is not None and args.stage in _NO_TRAFFIC:
        return f"--traffic applies to the shadow and canary stages, not {args.stage}"
    if not os.path.isdir(args.promotion_dir):
        return f"--promotion-dir {args.promotion_dir}: no such directory"
    return None


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


def stage_main(args, stdout, stderr, t_start: float) -> int:
    """Run one promotion stage (see the module docstring); returns the exit code."""
    from verify import _run as run
    from verify.cli import outputs
    from verify.cli.commands import (
        declared_evidence_problem,
        evidence_problem,
        load_contract,
        prepare_outputs,
        run_and_render,
        run_inputs,
        summary_text,
    )

    problem = _usage(args)
    for path in args.evidence:
        problem = problem or evidence_problem(path, f"--evidence {path}")
    if problem:
        stderr.write(f"verify: {problem}\n")
        return 2
    record_file = record_path(args.promotion_dir, args.stage)
    report_file = report_path(args.promotion_dir, args.stage)
    named = [("--json", args.json), ("--markdown", args.markdown), ("--html", args.html),
             ("the stage report", report_file), ("the stage record", record_file)]  # fmt: skip
    plan = prepare_outputs(named, run_inputs(args), stderr)
    if plan is None:
        return 2
    with plan:
        t_import = time.perf_counter()
        contract = load_contract(args.contract, stderr)
        if contract is None:
            return 2
        problem, (previous, earlier) = _stage_problem(contract, args)
        if problem:
            stderr.write(f"verify: --stage {args.stage}: {problem}\n")
            return 2
        problem = None if args.evidence else declared_evidence_problem(contract, plan)
        if problem:
            stderr.write(f"{problem}\n")
            return 2
        done = run_and_render(contract, args, stderr, t_start, t_import)
        if isinstance(done, int):
            return done
        report, texts = done
        report_text = texts["--json"]
        record = build_record(
            contract,
            args.stage,
            json.loads(report_text),
            os.path.basename(report_file),
            sha256_text(report_text),
            args.traffic,
            previous,
            earlier=earlier,
            toolkit=run.toolkit_version(),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        texts |= {"the stage report": report_text, "the stage record": dumps_record(record)}
        try:
            plan.write([texts[t.label] for t in plan.targets])
        except outputs.OutputError as err:
            stderr.write(f"verify: {err}\n")
            return 2
    stdout.write(summary_text(report, args.quiet))
    stdout.write(_lines(record, record_file))
    return 0 if record["passed"] else 1


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
