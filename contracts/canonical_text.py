"""The canonical JSON text of a contract: what a report hashes and shows.

Keys are sorted, separators carry no whitespace, numbers are written as the shortest decimal
that reads back to the same double (for a number the user wrote, the text they wrote up to
trailing zeros and exponent style), and every default and preset field is spelled out, so two
files that mean the same contract have the same canonical text.

The validator writes this text into every ``Contract`` it makes; ``contracts.canonical`` reads
it back. Users import both names from ``contracts.canonical``.
"""

from __future__ import annotations

import dataclasses
import json

from kernel_contracts.contracts.model import Contract

__all__ = ["canonical_json", "to_plain"]

_RENAMES = {"from_": "from"}


def to_plain(value: object) -> object:
    """Records as dicts (DSL key names), tuples as lists, scalars unchanged."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            _RENAMES.get(f.name, f.name): to_plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name != "source"
            # a field added to DSL v1 later is left out while unset, so the canonical form (and
            # hash) of every contract that does not use it stays what it was
            and not (f.metadata.get("omit_if_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, tuple | list):
        return [to_plain(v) for v in value]
    return value


def canonical_json(contract: Contract) -> str:
    """The canonical JSON text of ``contract`` (its ``source`` left out)."""
    return json.dumps(
        to_plain(contract), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
        allow_nan=False,
    )  # fmt: skip
