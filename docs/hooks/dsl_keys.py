"""Writes docs/dsl-keys.md, the DSL key reference, from the contract schema
(``kernel_contracts.contracts.schema.json_schema``, what ``python -m verify schema`` prints).

Run ``python docs/hooks/dsl_keys.py`` after changing the schema; a test
(``tests/project/test_docs_pages.py``) fails while the committed page differs from what this
writes.
"""

from __future__ import annotations

import json
import pathlib

PAGE = pathlib.Path(__file__).resolve().parents[1] / "dsl-keys.md"

_HEAD = """\
# DSL key reference

Every key of a contract file, generated from the contract schema (`python -m verify schema`
prints it as JSON Schema; `docs/hooks/dsl_keys.py` writes this page from it). A key path
`a.b` is key `b` inside mapping `a`; `a[]` is each item of list `a`; `a.<name>` is a mapping
from names you choose. [Contracts and commands](dsl.md) explains what the keys mean together;
rules that tie keys to each other (an estimator's parameters, a quantity's fields) are checked
when a contract is loaded and named in its error messages.

| key | type | values | required | meaning |
|---|---|---|---|---|
"""


def _type(node: dict) -> str:
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind:
        return kind
    if "const" in node:
        return json.dumps(node["const"])
    for key in ("anyOf", "oneOf"):
        if key in node:
            return " or ".join(_type(n) for n in node[key])
    return "—"


def _values(node: dict) -> str:
    parts = []
    if "enum" in node:
        parts.append(", ".join(f"`{v}`" for v in node["enum"]))
    if "const" in node:
        parts.append(f"`{json.dumps(node['const'])}`")
    for key, mark in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
                      ("exclusiveMaximum", "<")):  # fmt: skip
        if key in node:
            parts.append(f"{mark} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    for key in ("anyOf", "oneOf"):
        for option in node.get(key, ()):
            if shown := _values(option):
                parts.append(shown)
    items = node.get("items")
    if isinstance(items, dict) and not items.get("properties") and (shown := _values(items)):
        parts.append(f"each {shown}")
    return "; ".join(parts)


def _description(node: dict) -> str:
    """The node's description, or that of the one option of ``anyOf`` that has one."""
    if "description" in node:
        return node["description"]
    found = [o["description"] for o in node.get("anyOf", ()) if "description" in o]
    return found[0] if len(found) == 1 else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(node: dict, path: str, out: list[str]) -> None:
    required = set(node.get("required", ()))
    for name, sub in node.get("properties", {}).items():
        key = f"{path}.{name}" if path else name
        need = "yes" if name in required else ""
        out.append(
            f"| `{key}` | {_cell(_type(sub))} | {_cell(_values(sub))} | {need} | "
            f"{_cell(_description(sub))} |"
        )
        _children(sub, key, out)


def _children(node: dict, key: str, out: list[str]) -> None:
    _rows(node, key, out)
    for option in (*node.get("anyOf", ()), *node.get("oneOf", ())):
        if isinstance(option, dict) and "properties" in option:
            _rows(option, key, out)
    items = node.get("items")
    if isinstance(items, dict):
        _children(items, f"{key}[]", out)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        _children(extra, f"{key}.<name>", out)


def render() -> str:
    """The page's text."""
    from kernel_contracts.contracts.schema import json_schema

    out: list[str] = []
    _rows(json_schema(), "", out)
    return _HEAD + "\n".join(out) + "\n"


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
