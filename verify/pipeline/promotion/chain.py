"""Re-checking promotion records and their chain, trusting none of them.

``record_differences`` recomputes everything a record states from the report it is bound to:
the report file's sha256, the contract it was made for (rebuilt from the report's canonical
form), the stage's requirements, every check, ``passed``, the counted tokens, and the link to
the previous declared stage's record, which is re-checked the same way (so a record of
``full`` re-checks the whole chain back to the first declared stage). A record inherits every
check of its report: each report of the chain is re-checked in full (``verify check``: its
queries re-run, its verdicts and confidence bounds recomputed), whether the record is checked
on its own or as the previous stage of a stage being run, and any difference in it is one of
the record. The traffic share is the operator's declaration and ``created`` and ``toolkit``
are descriptive; everything else is recomputed.

``link`` is what running a stage needs from the stage before it: that stage's record exists,
re-checks (its report and its chain included), was made for this very contract file, and
passed; anything else is refused (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os

from kernel_contracts.contracts import ContractError, read_regular
from kernel_contracts.contracts.canonical import from_canonical
from kernel_contracts.verify.pipeline.promotion.record import (
    FORMAT,
    RECORD_KEYS,
    PromotionError,
    checks,
    counted_tokens,
    held,
    previous_stage,
    record_path,
    requirements,
)

__all__ = ["is_record", "link", "read_record", "record_differences"]

_LIMIT = 64 * 1024 * 1024


def _read(path: str, what: str) -> tuple[dict, str]:
    """The JSON object at ``path`` and its sha256; ``PromotionError`` naming the file."""
    from kernel_contracts.verify.proving.check.recheck import strict_json

    try:
        raw = read_regular(path, _LIMIT)
    except FileNotFoundError:
        raise PromotionError(f"{path}: no such file") from None
    except OSError as err:
        raise PromotionError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        data = strict_json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PromotionError(f"{path}: not a JSON {what}: {err}") from None
    except ValueError as err:
        raise PromotionError(f"{path}: not a usable {what}: {err}") from None
    except RecursionError:
        raise PromotionError(f"{path}: not a usable {what}: nested too deeply") from None
    if not isinstance(data, dict):
        raise PromotionError(f"{path}: not a {what} (not a JSON object)")
    return data, hashlib.sha256(raw).hexdigest()


def read_record(path: str) -> tuple[dict, str]:
    """A promotion record and its file's sha256; ``PromotionError`` when it is no record."""
    data, sha = _read(path, "promotion record")
    if data.get("format") != FORMAT:
        raise PromotionError(f"{path}: not a promotion record (format {FORMAT!r})")
    return data, sha


def is_record(path: str) -> bool:
    """Whether ``path`` is a JSON object whose ``format`` names a promotion record."""
    try:
        data = json.loads(read_regular(path, _LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def _bound_report(record: dict, directory: str, diff) -> tuple[dict, str] | None:
    """The report file the record names, when its sha256 is the one the record states."""
    info = record.get("report")
    name = info.get("path") if isinstance(info, dict) else None
    if not isinstance(name, str) or not name or os.path.basename(name) != name:
        diff("report.path", f"{name!r} is not the name of a file beside the record")
        return None
    path = os.path.join(directory, name)
    try:
        report, sha = _read(path, "report")
    except PromotionError as err:
        diff("report", str(err))
        return None
    if info.get("sha256") != sha:
        diff("report.sha256", f"{info.get('sha256')!r} but {path} hashes to {sha} (the report "
             "changed since the record was made)")  # fmt: skip
        return None
    return report, path


def _contract(report: dict, diff):
    info = report.get("contract")
    canonical = info.get("canonical") if isinstance(info, dict) else None
    if not isinstance(canonical, str):
        diff("report.contract.canonical", "missing")
        return None
    try:
        return from_canonical(canonical, path="contract.canonical", sha256=info.get("sha256"))
    except ContractError as err:
        diff("report.contract.canonical", str(err).splitlines()[0])
        return None


def _compare(record: dict, key: str, want, diff) -> None:
    got = record.get(key)
    if got != want or type(got) is not type(want):
        diff(key, f"{json.dumps(got, ensure_ascii=False)} but recomputed "
             f"{json.dumps(want, ensure_ascii=False)}")  # fmt: skip


def record_differences(record: dict, directory: str, *, depth: int = 0) -> list[str]:
    """Every difference between ``record`` (read from ``directory``) and what its report, the
    report's own re-check and the chain give; empty when it re-checks."""
    out: list[str] = []

    def diff(where: str, message: str) -> None:
        out.append(f"{where}: {message}")

    extra, missing = sorted(set(record) - RECORD_KEYS), sorted(RECORD_KEYS - set(record))
    if extra or missing:
        diff("record", f"fields no record has: {extra}" if extra else f"missing fields: {missing}")
        return out
    found = _bound_report(record, directory, diff)
    if found is None:
        return out
    report, path = found
    contract = _contract(report, diff)
    if contract is None:
        return out
    stage = record["stage"]
    try:
        previous = previous_stage(contract, stage) if isinstance(stage, str) else None
    except PromotionError:
        diff("stage", f"{stage!r} is not a stage the contract declares")
        return out
    info = report["contract"]
    want_contract = {
        "name": info.get("name"),
        "sha256": info.get("sha256"),
        "canonical_sha256": info.get("canonical_sha256"),
    }
    _compare(record, "contract", want_contract, diff)
    traffic = record["traffic"]
    if traffic is not None and (
        not isinstance(traffic, int | float) or isinstance(traffic, bool) or not 0 < traffic <= 1
    ):
        diff("traffic", f"{traffic!r} is not a share in (0, 1]")
        return out
    if traffic is not None and stage in ("offline_ci", "full"):
        diff("traffic", f"declared for stage {stage}, which has no traffic share")
    earlier: list[str] = []
    if previous is None and record["previous"] is not None:
        diff("previous", f"stage {stage} is the first declared stage; it has no previous one")
    elif previous is not None:
        link_info = record["previous"]
        if not isinstance(link_info, dict) or link_info.get("stage") != previous:
            diff("previous", f"{json.dumps(link_info)} but stage {stage} follows {previous}")
            return out
        try:
            current, earlier = link(directory, previous, info.get("sha256"), depth=depth + 1)
        except PromotionError as err:
            diff("previous", str(err))
            return out
        _compare(record, "previous", current, diff)
    try:
        found_checks = checks(contract, stage, report, traffic, earlier)
        kept = held(contract, report, earlier)
        tokens = counted_tokens(stage, report)
        want_report = {
            "path": record["report"]["path"],
            "sha256": record["report"]["sha256"],
            "status": report["status"],
            "exit_code": report["exit_code"],
        }
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        diff("report", f"{path}: malformed ({type(err).__name__}: {err})")
        return out
    _compare(record, "report", want_report, diff)
    _compare(record, "tokens", tokens, diff)
    _compare(record, "requirements", requirements(contract, stage), diff)
    _compare(record, "checks", found_checks, diff)
    _compare(record, "held", kept, diff)
    _compare(record, "passed", all(c["met"] for c in found_checks), diff)
    from kernel_contracts.verify.proving.check.recheck import check_data

    result = check_data(report, report_dir=directory)
    out.extend(f"report {path}: {d}" for d in result.differences)
    return out


def link(directory: str, stage: str, contract_sha256, *, depth: int = 0) -> tuple[dict, list[str]]:
    """The link to the record of ``stage`` in ``directory`` (``{stage, path, sha256}``) and the
    clause keys it holds, after re-checking it and its chain; ``PromotionError`` (exit 2) when
    the record is missing, does not re-check, was made for another contract, or did not pass."""
    path = record_path(directory, stage)
    if depth > 8:
        raise PromotionError(f"{path}: the chain of records does not end")
    if not os.path.lexists(path):
        raise PromotionError(
            f"{path}: no record of stage {stage}; run --stage {stage} first (stages are not "
            "skipped)"
        )
    record, sha = read_record(path)
    if record.get("stage") != stage:
        raise PromotionError(f"{path}: a record of stage {record.get('stage')!r}, not {stage}")
    info = record.get("contract")
    made_for = info.get("sha256") if isinstance(info, dict) else None
    if made_for != contract_sha256:
        raise PromotionError(
            f"{path}: stale: made for contract sha256 {made_for}, this contract's is "
            f"{contract_sha256} (the contract changed; run every stage again from the first)"
        )
    problems = record_differences(record, directory, depth=depth)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PromotionError(f"{path}: does not re-check: {problems[0]}{more}")
    if record.get("passed") is not True:
        raise PromotionError(
            f"{path}: stage {stage} did not pass; run --stage {stage} again once it does"
        )
    return {"stage": stage, "path": os.path.basename(path), "sha256": sha}, record["held"]
