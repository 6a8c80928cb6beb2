"""Promotion records: what one stage of the pipeline required, what its report showed, and the
record of the stage before it, bound together by sha256.

A record is JSON (``format: kernel-contracts/promotion/1``). It names its stage, the contract
(file sha256 and canonical sha256), the report it rests on (a file beside the record, by name
and sha256), the traffic share the operator declared (``--traffic``), the evidence tokens
counted, the stage's requirements as the contract states them, one check per requirement, and
the record of the previous declared stage (by name and sha256). ``passed`` is true when every
check is met.

Requirements of a stage (the contract's ``promotion:`` section; stages run in the order
offline_ci, shadow, canary, full, and a contract may leave some out):

- ``min_tokens``: the evidence holds at least this many tokens. At ``offline_ci`` every evidence
  source counts; at ``shadow``, ``canary`` and ``full`` only logged traffic does (``logprobs``
  sources), never emulated tokens.
- ``traffic``: the share of production traffic the evidence comes from, as the operator
  declares it with ``--traffic`` (shadow: the share mirrored to the candidate; canary: the
  share it served), must be at least the stage's ``traffic``. The toolkit cannot measure it
  from a log; the record states the declared number.
- ``obligations``: every guarantee proved.
- ``clauses``: every numerical and statistical clause held, on each of its slices, at its
  confidence: at least one evidence source gives ``held`` and none gives anything but
  ``held`` or ``skipped`` (a source that cannot measure the metric). A clause that no source
  of this stage measures (every verdict ``skipped``: a sampled-token log cannot give a
  full-vocabulary metric) passes only when it was held at an earlier stage of the chain (the
  record's ``held`` list carries those keys forward); at the first declared stage every
  clause must be held. Runtime and observability clauses must not be violated or
  inconclusive.
- ``escalation``: no rule whose action is ``halt_promotion`` or ``rollback`` fired.

Every function here is pure over JSON data, so ``python -m verify`` writes records and
``python -m verify check`` recomputes them with the same code.
"""

from __future__ import annotations

import hashlib
import json
import os

from kernel_contracts.contracts import KernelContractsError

__all__ = [
    "FORMAT",
    "HALTING",
    "RECORD_KEYS",
    "REPORT_SUFFIX",
    "PromotionError",
    "build_record",
    "checks",
    "clause_keys",
    "counted_tokens",
    "dumps_record",
    "held",
    "previous_stage",
    "record_path",
    "report_path",
    "requirements",
    "sha256_text",
]

FORMAT = "kernel-contracts/promotion/1"
REPORT_SUFFIX = ".report.json"
HALTING = ("halt_promotion", "rollback")
RECORD_KEYS = frozenset(
    ("format", "stage", "passed", "contract", "report", "traffic", "tokens", "requirements",
     "checks", "held", "previous", "toolkit", "created")
)  # fmt: skip
_MEASURED = ("numerical", "statistical")


class PromotionError(KernelContractsError, ValueError):
    """A stage that cannot be run or a record that cannot be used; ``str`` is the one-line
    message (exit 2)."""


def record_path(directory: str, stage: str) -> str:
    return os.path.join(directory, f"{stage}.json")


def report_path(directory: str, stage: str) -> str:
    return os.path.join(directory, f"{stage}{REPORT_SUFFIX}")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def previous_stage(contract, stage: str) -> str | None:
    """The declared stage before ``stage``; ``PromotionError`` when ``stage`` is not declared."""
    names = [s.name for s in contract.promotion]
    if not names:
        raise PromotionError(f"{contract.source.path}: the contract declares no promotion stages")
    if stage not in names:
        raise PromotionError(
            f"{contract.source.path}: promotion.{stage}: stage not declared (declared: "
            f"{', '.join(names)})"
        )
    i = names.index(stage)
    return names[i - 1] if i else None


def requirements(contract, stage: str) -> dict:
    """The stage's requirements as the contract states them."""
    s = next(s for s in contract.promotion if s.name == stage)
    return {"min_tokens": s.min_tokens, "traffic": s.traffic}


def counted_tokens(stage: str, report: dict) -> int:
    """Evidence tokens that count toward ``min_tokens`` (see the module docstring)."""
    evidence = report.get("evidence") or {}
    total = 0
    for source in evidence.get("sources") or []:
        if stage == "offline_ci" or source.get("kind") == "logprobs":
            total += int(source.get("tokens", 0))
    return total


def clause_keys(contract) -> list[str]:
    """``id[slice]`` of every numerical and statistical clause verdict the contract asks for."""
    keys = [f"{c.id}[{c.slice}]" for c in contract.numerical]
    return keys + [f"{c.id}[{s}]" for c in contract.statistical for s in c.slices]


def held(contract, report: dict, earlier=()) -> list[str]:
    """The clause keys held in ``report`` (some source held, none worse) or in ``earlier``."""
    seen: dict[str, set] = {}
    for c in report.get("clauses") or []:
        seen.setdefault(f"{c.get('id')}[{c.get('slice')}]", set()).add(c.get("status"))
    here = {k for k, s in seen.items() if "held" in s and s <= {"held", "skipped"}}
    return [k for k in clause_keys(contract) if k in here or k in set(earlier)]


def _clause_problems(contract, report: dict, earlier) -> tuple[list[str], int]:
    seen: dict[str, list[str]] = {}
    for c in report.get("clauses") or []:
        seen.setdefault(f"{c.get('id')}[{c.get('slice')}]", []).append(c.get("status"))
    problems, carried = [], 0
    for key in clause_keys(contract):
        statuses = seen.get(key, [])
        bad = sorted({s for s in statuses if s not in ("held", "skipped")})
        if bad:
            problems.append(f"{key} {'/'.join(bad)}")
        elif "held" not in statuses:
            if key in earlier:
                carried += 1
            else:
                problems.append(f"{key} not measured here nor held at an earlier stage")
    for c in (*contract.runtime, *contract.observability):
        key = f"{c.id}[all]"
        bad = sorted({s for s in seen.get(key, []) if s in ("violated", "inconclusive")})
        if bad:
            problems.append(f"{key} {'/'.join(bad)}")
    return problems, carried


def checks(contract, stage: str, report: dict, traffic: float | None, earlier=()) -> list[dict]:
    """One check per requirement of ``stage``, recomputed from the report's JSON data;
    ``earlier`` are the clause keys held at earlier stages of the chain."""
    need = requirements(contract, stage)
    tokens = counted_tokens(stage, report)
    counted = "evidence tokens" if stage == "offline_ci" else "logged evidence tokens"
    out = [
        {
            "requirement": "min_tokens",
            "met": tokens >= need["min_tokens"],
            "detail": f"{tokens} {counted}, {need['min_tokens']} required",
        }
    ]
    if need["traffic"] is not None:
        shown = "none declared" if traffic is None else f"declared {traffic:g}"
        out.append(
            {
                "requirement": "traffic",
                "met": traffic is not None and traffic >= need["traffic"],
                "detail": f"traffic share {shown}, at least {need['traffic']:g} required",
            }
        )
    obligations = report.get("obligations") or []
    open_ = [o.get("id") for o in obligations if o.get("status") != "proved"]
    out.append(
        {
            "requirement": "obligations",
            "met": not open_,
            "detail": f"{len(obligations) - len(open_)} of {len(obligations)} proved"
            + (f"; not proved: {', '.join(map(str, open_))}" if open_ else ""),
        }
    )
    problems, carried = _clause_problems(contract, report, frozenset(earlier))
    detail = "; ".join(problems) or "every clause held" + (
        f" ({carried} not measurable here, held at an earlier stage)" if carried else ""
    )
    out.append({"requirement": "clauses", "met": not problems, "detail": detail})
    fired = [
        f"{d.get('action')} on {d.get('clause')}"
        for d in report.get("escalation") or []
        if d.get("fired") and d.get("action") in HALTING
    ]
    out.append(
        {
            "requirement": "escalation",
            "met": not fired,
            "detail": "no halt_promotion or rollback fired" if not fired else "; ".join(fired),
        }
    )
    return out


def build_record(
    contract,
    stage: str,
    report: dict,
    report_name: str,
    report_sha256: str,
    traffic: float | None,
    previous: dict | None,
    *,
    earlier=(),
    toolkit: str,
    created: str,
) -> dict:
    """The record of ``stage`` resting on ``report`` (its JSON data, written as
    ``report_name`` with sha256 ``report_sha256``); ``previous`` links the previous record,
    whose ``held`` clause keys are ``earlier``."""
    found = checks(contract, stage, report, traffic, earlier)
    info = report["contract"]
    return {
        "format": FORMAT,
        "stage": stage,
        "passed": all(c["met"] for c in found),
        "contract": {
            "name": info["name"],
            "sha256": info["sha256"],
            "canonical_sha256": info["canonical_sha256"],
        },
        "report": {
            "path": report_name,
            "sha256": report_sha256,
            "status": report["status"],
            "exit_code": report["exit_code"],
        },
        "traffic": traffic,
        "tokens": counted_tokens(stage, report),
        "requirements": requirements(contract, stage),
        "checks": found,
        "held": held(contract, report, earlier),
        "previous": previous,
        "toolkit": toolkit,
        "created": created,
    }


def dumps_record(record: dict) -> str:
    return json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
