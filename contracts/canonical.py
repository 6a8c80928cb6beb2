"""The canonical JSON text of a validated contract: written, and read back.

``canonical_json`` writes it (``contracts.canonical_text``, which the validator uses too): keys
sorted, no whitespace, the shortest decimal of every number, every default and preset field
spelled out, so two files that mean the same contract have the same canonical text.

``from_canonical`` reads such a text back: it turns it into the DSL's own shape, validates it
like a contract file (every range and finiteness check applies), and requires that the result's
canonical text is the text it was given, so nothing in it goes unchecked.
"""

from __future__ import annotations

import dataclasses
import json
import math

from kernel_contracts.contracts.canonical_text import canonical_json, to_plain
from kernel_contracts.contracts.document import Document
from kernel_contracts.contracts.errors import ContractError, Problem
from kernel_contracts.contracts.model import Contract
from kernel_contracts.contracts.validate import validate

__all__ = ["canonical_json", "from_canonical", "to_plain"]

_GUARANTEE_DEFAULTS = (("estimator", "plain"), ("assume", []))


def _strict_object(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def _dsl(plain: object) -> object:
    """The DSL document (as a contract file would give it) that canonical ``plain`` describes;
    shapes it does not know are passed on for the validator to report."""
    if not isinstance(plain, dict):
        return plain
    doc = {("contract" if k == "version" else k): v for k, v in plain.items()}

    def dropped(item):  # optional fields are written as null in the canonical form
        return {k: v for k, v in item.items() if v is not None} if isinstance(item, dict) else item

    for family in ("numerical", "statistical", "runtime", "guarantees"):
        if isinstance(doc.get(family), list):
            doc[family] = [dropped(c) for c in doc[family]]
    if isinstance(doc.get("guarantees"), list):  # defaults a quantity may not name
        doc["guarantees"] = [
            {k: v for k, v in g.items() if (k, v) not in _GUARANTEE_DEFAULTS}
            if isinstance(g, dict)
            else g
            for g in doc["guarantees"]
        ]
    kernels = doc.get("kernels")
    if isinstance(kernels, dict):
        doc["kernels"] = {name: _kernel(k) for name, k in kernels.items()}
    slices = doc.get("slices")
    if isinstance(slices, list) and all(isinstance(s, dict) and "name" in s for s in slices):
        doc["slices"] = {s["name"]: dropped({**s, "name": None}) for s in slices}
    rules = doc.get("escalation")
    if isinstance(rules, list) and all(isinstance(r, dict) for r in rules):
        doc["escalation"] = [
            {"when": {"clause": r.get("clause"), "status": r.get("status")}}
            | {k: v for k, v in r.items() if k not in ("clause", "status")}
            for r in rules
        ]
    stages = doc.get("promotion")
    if isinstance(stages, list) and all(isinstance(s, dict) and "name" in s for s in stages):
        if stages:
            doc["promotion"] = {s["name"]: dropped({**s, "name": None}) for s in stages}
        else:
            del doc["promotion"]
    evidence = doc.get("evidence")
    if isinstance(evidence, dict):
        evidence = dropped(evidence)
        if evidence:
            doc["evidence"] = evidence
        else:
            del doc["evidence"]
    return doc


def _kernel(k: object) -> object:
    if not isinstance(k, dict):
        return k
    out = {key: v for key, v in k.items() if key != "provenance"}  # the preset's, re-derived
    attention = out.get("attention")
    if isinstance(attention, dict) and isinstance(attention.get("tiles"), str):
        tiles = attention["tiles"]
        if tiles.isdigit() and tiles == str(int(tiles)):
            out["attention"] = {**attention, "tiles": int(tiles)}
    return out


def from_canonical(text: str, *, path: str = "<canonical>", sha256: str = "") -> Contract:
    """The ``Contract`` whose canonical JSON text is ``text`` (the inverse of
    ``canonical_json``), validated as a contract file is.

    Raises ``ContractError`` when ``text`` is not JSON (duplicate keys and non-finite numbers
    included), not a valid contract, or not exactly the canonical text of the contract it
    describes; problems are named by ``path``.
    """

    def fail(message: str) -> ContractError:
        return ContractError([Problem(path, None, None, "", message)])

    if not isinstance(text, str):
        raise fail("the canonical form must be a JSON string")
    try:
        plain = json.loads(text, object_pairs_hook=_strict_object, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise fail(f"not canonical JSON: {err}") from None
    if not isinstance(plain, dict):
        raise fail("the canonical form must be a JSON object")
    if any(isinstance(x, float) and not math.isfinite(x) for x in _scalars(plain)):
        raise fail("not canonical JSON: a number out of range")
    try:
        contract = validate(Document(tree=_dsl(plain)), path=path, sha256=sha256, base_dir=".")
    except ContractError as err:  # a JSON text has no lines to point at: name key paths only
        raise ContractError(
            dataclasses.replace(p, line=None, col=None) for p in err.problems
        ) from None
    if contract.source.canonical != text:
        raise fail(_first_difference(contract.source.canonical, text))
    return contract


def _scalars(value: object):
    if isinstance(value, dict):
        for v in value.values():
            yield from _scalars(v)
    elif isinstance(value, list):
        for v in value:
            yield from _scalars(v)
    else:
        yield value


def _first_difference(want: str, got: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if at is None:
        at = min(len(want), len(got))
    return (
        f"not the canonical form of the contract it describes (first difference at character "
        f"{at}: {got[max(0, at - 20) : at + 20]!r}, canonical {want[max(0, at - 20) : at + 20]!r})"
    )
