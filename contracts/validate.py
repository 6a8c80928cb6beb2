"""Validating a parsed contract document into a ``Contract``, gathering every problem."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from kernel_contracts.contracts.canonical_text import canonical_json
from kernel_contracts.contracts.checks import Checker, describe, show, sub
from kernel_contracts.contracts.document import INVALID, Document
from kernel_contracts.contracts.errors import ContractError
from kernel_contracts.contracts.fields import OBJECTS, VERSION
from kernel_contracts.contracts.guarantees import read_guarantee
from kernel_contracts.contracts.kernelspec import read_kernels
from kernel_contracts.contracts.model import Contract, Policy, Source
from kernel_contracts.contracts.sections import (
    Names,
    emulate_relative,
    read_escalation,
    read_evidence,
    read_numerical,
    read_observability,
    read_policy,
    read_promotion,
    read_runtime,
    read_slice,
    read_statistical,
)

__all__ = ["validate"]

_FAMILIES = ("numerical", "statistical", "runtime", "observability", "guarantees")


def validate(doc: Document, *, path: str, sha256: str, base_dir: str) -> Contract:
    """The ``Contract`` that ``doc`` describes; ``ContractError`` listing every problem if not."""
    ck = Checker(path, doc.locations, doc.root)
    ck.problems.extend(doc.problems)
    if doc.tree is INVALID:  # the reader could not make a document; it said why
        raise ContractError(ck.problems)
    if not isinstance(doc.tree, dict):
        ck.report("", f"the top level must be a mapping of contract keys, got {describe(doc.tree)}")
        raise ContractError(ck.problems)
    f = OBJECTS["contract"]
    top = ck.mapping(doc.tree, "", f.known, f.required)
    names = _names(ck, top)
    parts: dict = {}
    if "contract" in top:
        version = ck.integer(top["contract"], "contract")
        if version is not None and version != VERSION:
            ck.report(
                "contract", f"unsupported DSL version {version}; this toolkit reads {VERSION}"
            )
        parts["version"] = version
    if "name" in top:
        parts["name"] = ck.string(top["name"], "name")
    if "description" in top:
        parts["description"] = ck.string(top["description"], "description", nonempty=False)
    policy = read_policy(ck, top["policy"], "policy") if "policy" in top else Policy()
    parts["policy"] = policy
    if "kernels" in top:
        parts["kernels"] = read_kernels(ck, top["kernels"], "kernels")
    readers = {
        "numerical": lambda v, k: read_numerical(ck, v, k, names),
        "statistical": lambda v, k: read_statistical(ck, v, k, names),
        "runtime": lambda v, k: read_runtime(ck, v, k),
        "observability": lambda v, k: read_observability(ck, v, k),
        "guarantees": lambda v, k: read_guarantee(ck, v, k, names, policy),
        "escalation": lambda v, k: read_escalation(ck, v, k, names),
    }
    for family, read in readers.items():
        if family in top:
            parts[family] = ck.each(top[family], family, read)
    if "slices" in top:
        parts["slices"] = _slices(ck, top["slices"])
    if "promotion" in top:
        parts["promotion"] = read_promotion(ck, top["promotion"], "promotion")
    written_logprobs = None
    if "evidence" in top:
        evidence = read_evidence(ck, top["evidence"], "evidence", base_dir)
        parts["evidence"] = evidence
        logprobs = top["evidence"].get("logprobs") if isinstance(top["evidence"], dict) else None
        written_logprobs = logprobs.get("path") if isinstance(logprobs, dict) else None
    if ck.problems:
        raise ContractError(ck.problems)
    contract = Contract(source=Source(path=path, sha256=sha256, canonical=""), **parts)
    shown = contract
    if contract.evidence.logprobs is not None:  # canonical form keeps the path as written
        logprobs = dataclasses.replace(contract.evidence.logprobs, path=written_logprobs)
        shown = dataclasses.replace(
            contract, evidence=dataclasses.replace(contract.evidence, logprobs=logprobs)
        )
    if contract.evidence.emulate is not None:  # and the model's paths relative to the folder
        emulate = emulate_relative(contract.evidence.emulate, base_dir)
        shown = dataclasses.replace(
            shown, evidence=dataclasses.replace(shown.evidence, emulate=emulate)
        )
    source = Source(
        path=path,
        sha256=sha256,
        canonical=canonical_json(shown),
        locations=MappingProxyType(dict(doc.locations)),
    )
    return dataclasses.replace(contract, source=source)


def _names(ck: Checker, top: dict) -> Names:
    """Every clause id, guarantee id and slice name; a repeated id is reported where it recurs."""
    found = []
    for family in _FAMILIES:
        items = top.get(family)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                key = sub(sub(family, i), "id")
                found.append((ck.where(key), item["id"], family, key))
    found.sort(key=lambda entry: entry[0])
    first: dict[str, tuple[int, int]] = {}
    clauses: dict[str, str] = {}
    guarantees: set[str] = set()
    for where, ident, family, key in found:
        if ident in first:
            ck.report(key, f"duplicate id {show(ident)}; first used at line {first[ident][0]}")
            continue
        first[ident] = where
        if family == "guarantees":
            guarantees.add(ident)
        else:
            clauses[ident] = family
    slices = top.get("slices")
    slice_names = frozenset(slices) if isinstance(slices, dict) else frozenset()
    return Names(MappingProxyType(clauses), frozenset(guarantees), slice_names)


def _slices(ck: Checker, value: object):
    if not isinstance(value, dict):
        ck.expected("slices", "a mapping of slice names to slices", value)
        return None
    out = [read_slice(ck, name, body, sub("slices", name)) for name, body in value.items()]
    return None if any(s is None for s in out) else tuple(out)
