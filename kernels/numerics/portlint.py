"""Find operations whose results depend on the backend, in a lowered (StableHLO) program.

The emulation promises the same bits on every machine. XLA compiles some operations
differently per backend, so a program that uses them cannot keep that promise:

* **implementation**: transcendental functions (``exponential``, ``log``, ``tanh``, ``rsqrt``,
  ``logistic``, ``power``, the trigonometric functions, CHLO's ``erf`` and its kin) are
  approximations each backend writes its own way (its own polynomials on the CPU, libdevice
  and approximate instructions on an NVIDIA GPU);
* **rounding**: ``divide`` and ``sqrt`` on a type narrower than binary64: the GPU compiles a
  float32 division to an instruction that is not correctly rounded;
* **order**: float reductions (``reduce``, ``reduce_window``, ``scatter``,
  ``select_and_scatter`` whose combiner adds or multiplies floats) and float contractions
  (``dot_general``, ``dot``, ``convolution``) leave the order of their sums to the backend's
  library and emitter (cuBLAS and its split-K, warp-shuffle trees, TF32 on a GPU; Eigen and
  vector lanes on the CPU).

An order is harmless when the sum is exact, and the emulation forms exact sums on purpose
(group sums of e4m3 products, int8 products in binary64). Code that does so says it by
tracing the operation under :func:`order_free` (a ``jax.named_scope``); the lint then skips
*order* findings inside that scope, never the other two kinds. The exactness claim itself is
tested where it is made: the kernels' bits are compared with the NumPy reference, which sums
in another order.

Not checked here: a float multiply followed by an add, which the GPU compiler fuses into one
multiply-add (rounded once) while the CPU rounds twice. The emulation keeps every such
product exact; the lint cannot see exactness.

Usage::

    text = jax.jit(fn).lower(*args).as_text(debug_info=True)
    assert backend_dependent(text) == ()

Without ``debug_info`` the scopes are not in the text, and every order finding is reported.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

import jax

from kernel_contracts.kernels.numerics.castlint import float_type

__all__ = ["ORDER_FREE", "Finding", "backend_dependent", "order_free"]

ORDER_FREE = "order_free"

Kind = Literal["implementation", "rounding", "order"]

_IMPLEMENTATION = frozenset(
    {
        "stablehlo.exponential",
        "stablehlo.exponential_minus_one",
        "stablehlo.log",
        "stablehlo.log_plus_one",
        "stablehlo.logistic",
        "stablehlo.tanh",
        "stablehlo.rsqrt",
        "stablehlo.cbrt",
        "stablehlo.power",
        "stablehlo.sine",
        "stablehlo.cosine",
        "stablehlo.tan",
        "stablehlo.atan2",
    }
)
_CHLO_EXACT = frozenset({"chlo.broadcast_add", "chlo.broadcast_subtract"})  # not transcendental
_ROUNDING = frozenset({"stablehlo.divide", "stablehlo.sqrt"})
_CONTRACTIONS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})
_REDUCTIONS = frozenset(
    {
        "stablehlo.reduce",
        "stablehlo.reduce_window",
        "stablehlo.scatter",
        "stablehlo.select_and_scatter",
    }
)
_COMBINERS = ("stablehlo.add", "stablehlo.multiply", "stablehlo.subtract")

_DEF = re.compile(r'^(?:%[\w.$#:-]+ = )?"?([\w.]+)"?')
_LOC_USE = re.compile(r"loc\((#loc\d*)\)\s*$")
_LOC_DEF = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$")
_LOC_NAME = re.compile(r'^"([^"]*)"')
_LOC_REFS = re.compile(r"#loc\d*")


class Finding(NamedTuple):
    """One operation whose result may differ between backends."""

    kind: Kind
    op: str  # e.g. "stablehlo.exponential"
    element: str  # the float element type it computes in
    scope: str  # the operation's name path (its named scopes), when the text has locations
    line: str  # the operation's line, as printed (without its location)

    def __str__(self) -> str:
        where = f" in {self.scope}" if self.scope else ""
        return f"{self.kind}: {self.op} on {self.element}{where}: {self.line!r}"


def order_free():
    """A named scope for operations whose sums are exact, so their order cannot change them
    (module docstring): ``with order_free(): ...``."""
    return jax.named_scope(ORDER_FREE)


def _locations(text: str) -> dict[str, str]:
    """Each location alias's name path: the first quoted name along its chain of aliases."""
    raw = {}
    for line in text.splitlines():
        if m := _LOC_DEF.match(line.strip()):
            raw[m.group(1)] = m.group(2)
    names: dict[str, str] = {}

    def name(alias: str, seen: frozenset = frozenset()) -> str:
        if alias in names or alias in seen or alias not in raw:
            return names.get(alias, "")
        body = raw[alias]
        if m := _LOC_NAME.match(body):
            found = m.group(1)
        else:  # callsite(#a at #b), fused[...]: the first of the aliases it names that has one
            found = next((n for r in _LOC_REFS.findall(body) if (n := name(r, seen | {alias}))), "")
        names[alias] = found
        return found

    for alias in raw:
        name(alias)
    return names


def _element(line: str) -> str | None:
    """The float element type an operation computes in: its first float operand or result."""
    sig = line.rsplit(" : ", 1)[-1] if " : " in line else ""
    for t in re.findall(r"tensor<[^>]*>|\b(?:f|bf)\w+\b", sig):
        if e := float_type(t):
            return e
    return None


def backend_dependent(text: str) -> tuple[Finding, ...]:
    """Every operation of the StableHLO module ``text`` whose result may depend on the
    backend (module docstring), in program order; ``()`` when there is none."""
    locs = _locations(text)
    lines = text.splitlines()
    found: list[Finding] = []
    i = 0
    while i < len(lines):
        head = lines[i].strip()
        i += 1
        m = _DEF.match(head)
        if not m or head.startswith(("#loc", "func.func", "module", "}")):
            continue
        op = m.group(1)
        body, tail = "", head
        if op in _REDUCTIONS:
            body, tail, i = _region(lines, i, head)
        scope = locs.get(u.group(1), "") if (u := _LOC_USE.search(tail)) else ""
        line = _LOC_USE.sub("", head).rstrip()
        element = _element(head) or _element(tail)
        if element is None:
            continue
        if op in _IMPLEMENTATION or (op.startswith("chlo.") and op not in _CHLO_EXACT):
            kind: Kind = "implementation"
        elif op in _ROUNDING and element != "f64":
            kind = "rounding"
        elif op in _CONTRACTIONS or (op in _REDUCTIONS and any(c in body for c in _COMBINERS)):
            kind = "order"
        else:
            continue
        if kind == "order" and ORDER_FREE in scope.split("/"):
            continue
        found.append(Finding(kind, op, element, scope, line))
    return tuple(found)


def _region(lines: list[str], i: int, head: str) -> tuple[str, str, int]:
    """A reduction's combiner (its ``applies`` clause, or the region after its first line),
    the line that ends the operation (which holds its location), and the next line's index."""
    if " applies " in head:
        return head.split(" applies ", 1)[1], head, i
    depth = head.count("{") - head.count("}")
    if depth <= 0 and not (i < len(lines) and lines[i].strip().startswith("reducer")):
        return "", head, i
    body = []
    while i < len(lines):
        body.append(lines[i])
        depth += lines[i].count("{") - lines[i].count("}")
        i += 1
        if depth <= 0 and "}" in body[-1]:
            break
    return "\n".join(body), body[-1].strip() if body else head, i
