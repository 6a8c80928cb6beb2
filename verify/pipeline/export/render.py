"""An export as the text a framework reads: YAML, Hydra command-line overrides, or JSON.

Every text opens with its provenance: the contract's name, path and sha256, the framework code
the keys were taken from, the range of its releases and the main-branch commit they were checked
against, the first release that has each estimator a release before lacks, each guarantee
the settings rest on with its verdict, and for each key the guarantees it comes from. YAML and
overrides carry it as ``#`` comment lines; JSON, which has no comments, as the ``contract``,
``framework``, ``guarantees`` and ``from`` members beside ``settings`` (so a TRL config is
``GRPOConfig(**doc["settings"])``).

Scalars are written as ``verify.pipeline.export.scalars`` says, so that YAML readers and Hydra's
override grammar read back the values the settings hold.
"""

from __future__ import annotations

import json
from fractions import Fraction

from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.pipeline.export.plan import Export
from kernel_contracts.verify.pipeline.export.request import Value
from kernel_contracts.verify.pipeline.export.scalars import scalar

__all__ = ["render", "scalar"]


def _header(export: Export, proved: dict[str, tuple[Status, str]]) -> list[str]:
    c = export.contract
    lines = [
        f"{export.framework.name} settings proved by a kernel contract (python -m verify export)",
        f"contract: {c.name} ({c.source.path})",
        f"sha256: {c.source.sha256}",
        f"keys as spelt in: {export.framework.source}",
        f"keys checked against: {export.framework.checked}",
    ]
    lines += [f"needs: {need}" for need in _needs(export)]
    for r in export.requests:
        status = proved.get(r.guarantee, (Status.UNKNOWN, ""))[0]
        lines.append(f"guarantee {r.guarantee} ({r.summary}): {status.label}")
    lines += [f"{s.key} <- {', '.join(s.guarantees)}" for s in export.settings]
    return [f"# {line}" for line in lines]


def _needs(export: Export) -> list[str]:
    """E.g. ``skyrl 0.3 or later for dppo_tv (G4)``: each estimator an earlier release lacks."""
    out = []
    for r in export.requests:
        first = export.framework.since.get(r.what)
        if first is not None:
            main = f"main@{export.framework.main[:8]}"
            when = main if first[0] == "main" else f"{first[0]} or later"
            out.append(f"{export.framework.name} {when} for {r.what} "
                       f"({r.guarantee}): {first[1]}")  # fmt: skip
    return out


def _nested(export: Export) -> dict:
    tree: dict = {}
    for s in export.settings:
        *parents, leaf = s.key.split(".")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = s.value
    return tree


def _yaml_lines(tree: dict, indent: int = 0) -> list[str]:
    lines = []
    for key, value in tree.items():
        if isinstance(value, dict):
            lines.append(" " * indent + f"{key}:")
            lines += _yaml_lines(value, indent + 2)
        else:
            lines.append(" " * indent + f"{key}: {scalar(value)}")
    return lines


def _json(export: Export, proved: dict[str, tuple[Status, str]]) -> str:
    c = export.contract

    def plain(v: Value):
        return float(v) if isinstance(v, Fraction) else v

    doc = {
        "contract": {"name": c.name, "path": c.source.path, "sha256": c.source.sha256},
        "framework": {
            "name": export.framework.name,
            "source": export.framework.source,
            "versions": {"min": export.framework.versions[0], "max": export.framework.versions[1]},
            "main": export.framework.main,
            "needs": _needs(export),
        },
        "guarantees": {
            r.guarantee: {
                "summary": r.summary,
                "status": proved.get(r.guarantee, (Status.UNKNOWN, ""))[0].label,
            }
            for r in export.requests
        },
        "settings": {s.key: plain(s.value) for s in export.settings},
        "from": {s.key: list(s.guarantees) for s in export.settings},
    }
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render(export: Export, fmt: str, proved: dict[str, tuple[Status, str]]) -> str:
    """The text of ``export`` in format ``fmt`` (``yaml``, ``overrides`` or ``json``)."""
    if fmt == "json":
        return _json(export, proved)
    lines = _header(export, proved)
    if fmt == "yaml":
        lines += _yaml_lines(_nested(export))
    elif fmt == "overrides":
        lines += [f"{s.key}={scalar(s.value, quote=chr(39))}" for s in export.settings]
    else:
        raise ValueError(f"unknown format {fmt!r}")
    return "\n".join(lines) + "\n"
