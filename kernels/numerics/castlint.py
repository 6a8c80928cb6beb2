"""Find float conversions that a compiler may erase, in a lowered (StableHLO) program.

XLA's GPU compiler collapses every chain of two or more floating-point converts into one
convert (its ``SimplifyFPConversions`` pass, on by default). A rounding written as
``x.astype(narrow).astype(jnp.float32)`` therefore does nothing on a GPU, and
``x64.astype(f32).astype(bf16)`` rounds once instead of twice. The emulation rounds with
integer bit operations instead (:mod:`kernels.numerics.bitround`); :func:`erasable_casts` checks
that no such chain is left.

A *chain* is a float convert whose operand is the result of a float convert that loses
information (to a format with fewer exponent or fraction bits), where the second convert
changes the type again. The operand is followed back through operations that only move values
(reshapes, broadcasts, slices, gathers, scatters, pads, concatenations, selects), through
function calls (arguments and results), and through ``while`` loops and ``case`` branches, so
a chain split by any of these is still found. Arithmetic ends a chain.

Usage::

    text = jax.jit(fn).lower(*args).as_text()
    assert erasable_casts(text) == ()
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

__all__ = ["Chain", "erasable_casts", "float_type", "loses_information"]

# element type -> (exponent bits, explicit fraction bits)
_FLOATS = {
    "f64": (11, 52),
    "f32": (8, 23),
    "tf32": (8, 10),
    "bf16": (8, 7),
    "f16": (5, 10),
    "f8E5M2": (5, 2),
    "f8E5M2FNUZ": (5, 2),
    "f8E4M3FN": (4, 3),
    "f8E4M3": (4, 3),
    "f8E4M3FNUZ": (4, 3),
    "f8E4M3B11FNUZ": (4, 3),
    "f8E3M4": (3, 4),
    "f8E8M0FNU": (8, 0),
    "f6E2M3FN": (2, 3),
    "f6E3M2FN": (3, 2),
    "f4E2M1FN": (2, 1),
}

# operations whose results hold their operands' values unchanged, only moved
_MOVES = frozenset(
    f"stablehlo.{name}"
    for name in (
        "reshape",
        "broadcast_in_dim",
        "broadcast",
        "dynamic_broadcast_in_dim",
        "dynamic_reshape",
        "transpose",
        "slice",
        "dynamic_slice",
        "real_dynamic_slice",
        "dynamic_update_slice",
        "concatenate",
        "pad",
        "gather",
        "scatter",
        "reverse",
        "select",
        "copy",
        "tuple",
        "get_tuple_element",
    )
)

_VALUE = r"%[\w.$-]+(?:#\d+)?"
_DEF = re.compile(r"^(%[\w.$-]+)(?::(\d+))? = (.*)$")
_OP = re.compile(r'^"?([\w.]+)"?')
_SYMBOL = r'(?:"[^"]*"|[\w.$-]+)'  # a function name, quoted when it has other characters
_FUNC = re.compile(rf"func\.func\s+(?:\w+\s+)?@({_SYMBOL})\((.*)")
_CALL = re.compile(rf"^(?:func\.)?call @({_SYMBOL})\(([^)]*)\)")
_ITER = re.compile(rf"({_VALUE}) = ({_VALUE})")
_TYPE = re.compile(r"tensor<([^>]*)>")


class Chain(NamedTuple):
    """One erasable chain: the lossy convert and the convert of its result."""

    function: str  # the function that holds the second convert
    first: str  # the lossy convert's line, as printed
    second: str  # the second convert's line, as printed
    types: tuple[str, str, str]  # element types: source, narrowed, converted to

    def __str__(self) -> str:
        src, mid, dst = self.types
        return f"{src} -> {mid} -> {dst} in @{self.function}: {self.first!r} then {self.second!r}"


def float_type(tensor_type: str) -> str | None:
    """The element type of a printed ``tensor<...>`` (or bare) type when it is a float type."""
    m = _TYPE.search(tensor_type)
    elem = (m.group(1) if m else tensor_type.strip()).split("x")[-1].strip()
    return elem if elem in _FLOATS else None


def loses_information(src: str, dst: str) -> bool:
    """Whether converting float type ``src`` to ``dst`` can change a value."""
    (es, fs), (ed, fd) = _FLOATS[src], _FLOATS[dst]
    return ed < es or fd < fs


def _operands(text: str) -> list[str]:
    """The SSA values an operation line names before its type signature."""
    head = text.split(" : ", 1)[0]
    return re.findall(_VALUE, head)


def _convert_types(text: str) -> tuple[str | None, str | None]:
    """(operand, result) element types of a printed ``stablehlo.convert``."""
    sig = text.split(" : ", 1)[1] if " : " in text else ""
    if "->" in sig:
        a, b = sig.split("->", 1)
        return float_type(a), float_type(b)
    t = float_type(sig)
    return t, t


class _Frame(NamedTuple):
    kind: str  # "func", "while", "case" or "other"
    results: tuple[str, ...]  # the operation's results (unique names)
    iter_args: tuple[str, ...]  # a while loop's iteration arguments (unique names)
    names: tuple[str, ...]  # their printed names
    region: list[int]  # the region being read (a list, to update in place)


class _Function:
    """One function's values (by name) and how they flow; calls are resolved per call site."""

    def __init__(self) -> None:
        self.moves: list[tuple[str, str]] = []
        self.converts: list[tuple[str, str, str, str, str]] = []  # src, dst, types, line
        self.params: list[str] = []
        self.returns: list[list[str]] = []
        self.calls: list[tuple[str, list[str], list[str]]] = []
        self.public = False


def _results(name: str, count: str | None) -> tuple[str, ...]:
    return tuple(f"{name}#{i}" for i in range(int(count))) if count else (name,)


def _parse(text: str) -> dict[str, _Function]:
    """Each function's flow of values. Printed names are unique only along a nesting path
    (sibling regions reuse them), so every definition gets a unique name and every use is
    resolved in the innermost region that defines it."""
    funcs: dict[str, _Function] = {}
    f = _Function()
    stack: list[_Frame] = []
    scopes: list[dict[str, str]] = [{}]
    count = [0]
    pending: _Frame | None = None  # a while loop whose regions open on the next lines

    def define(name: str) -> str:
        count[0] += 1
        unique = scopes[-1][name] = f"{name}.{count[0]}"
        return unique

    def use(name: str) -> str:
        base = name.split("#")[0]
        for scope in reversed(scopes):
            if name in scope:
                return scope[name]
            if base in scope:  # "%5#1" of an operation defined as "%5:2"
                return scope[base] + name[len(base) :]
        return name  # not defined in this function: a value of no interest

    def enter(frame: _Frame) -> None:
        stack.append(frame)
        scopes.append(dict(zip(frame.names, frame.iter_args, strict=True)))

    for raw in text.splitlines():
        line = raw.strip()
        net = line.count("{") - line.count("}")
        if m := _FUNC.search(line):
            f = funcs.setdefault(m.group(1), _Function())
            f.public = " public " in f" {line} "
            stack, scopes, count[0] = [], [{}], 0
            f.params = [define(p) for p in re.findall(r"(%arg\d+):", m.group(2))]
            stack.append(_Frame("func", (), (), (), [0]))
            scopes.append({})
            continue
        if line.startswith("}"):
            if stack:
                scopes.pop()
                if net < 0:
                    stack.pop()
                else:  # "} do {" or "}, {": the next region of the same operation
                    stack[-1].region[0] += 1
                    scopes.append(dict(zip(stack[-1].names, stack[-1].iter_args, strict=True)))
            continue
        if line.startswith("cond {") and pending is not None:
            enter(pending)
            pending = None
            continue
        if line.startswith("^"):  # a block's arguments
            for name in re.findall(r"(%[\w.$-]+):", line):
                define(name)
            continue
        d = _DEF.match(line)
        body = d.group(3) if d else line
        m = _OP.match(body)
        op = m.group(1) if m else ""
        if op == "stablehlo.while":
            pairs = [(it, use(init)) for it, init in _ITER.findall(body.split(" : ", 1)[0])]
        else:
            operands = [use(v) for v in _operands(body)]
        results = tuple(define(r) for r in _results(d.group(1), d.group(2))) if d else ()
        if op in ("return", "func.return"):
            f.returns.append(operands)
        elif op == "stablehlo.return" and stack:
            top = stack[-1]
            if top.kind == "while" and top.region[0] == 1:
                for v, it, r in zip(operands, top.iter_args, top.results, strict=False):
                    f.moves += [(v, it), (v, r)]
            elif top.kind == "case":
                f.moves += list(zip(operands, top.results, strict=False))
        elif op == "stablehlo.convert" and d:
            a, b = _convert_types(body)
            if operands and a and b:
                f.converts.append((operands[0], results[0], a, b, line))
        elif op == "stablehlo.while":
            count[0] += 1
            iters = tuple(f"{it}.{count[0]}" for it, _ in pairs)
            f.moves += [(init, it) for (_, init), it in zip(pairs, iters, strict=True)]
            f.moves += [(init, r) for (_, init), r in zip(pairs, results, strict=False)]
            pending = _Frame("while", results, iters, tuple(it for it, _ in pairs), [0])
        elif c := _CALL.match(body):
            args = [use(v) for v in re.findall(_VALUE, c.group(2))]
            f.calls.append((c.group(1), args, list(results)))
        elif op in _MOVES:
            f.moves += [(v, r) for v in operands for r in results]
        if net > 0 and op != "stablehlo.while":
            enter(_Frame("case" if op == "stablehlo.case" else "other", results, (), (), [0]))
    return funcs


class _Graph(NamedTuple):
    moves: dict[tuple, list[tuple]]
    converts: list[tuple[tuple, tuple, str, str, str, str]]  # src, dst, types, function, line


def _instantiate(funcs: dict[str, _Function]) -> _Graph:
    """Every function inlined at each of its call sites (nodes ``(call path, name)``), from the
    public functions (or, when none is marked, those never called)."""
    g = _Graph(defaultdict(list), [])
    called = {c[0] for fn in funcs.values() for c in fn.calls}
    roots = [n for n, fn in funcs.items() if fn.public] or [n for n in funcs if n not in called]
    todo = [(name, (name,)) for name in roots]
    while todo:
        name, path = todo.pop()
        fn = funcs[name]
        for a, b in fn.moves:
            g.moves[(path, a)].append((path, b))
        for src, dst, a, b, line in fn.converts:
            g.converts.append(((path, src), (path, dst), a, b, name, line))
        for k, (callee, args, res) in enumerate(fn.calls):
            if callee not in funcs or callee in path:
                continue
            sub = (*path, f"{k}", callee)
            for a, p in zip(args, funcs[callee].params, strict=False):
                g.moves[(path, a)].append((sub, p))
            for ret in funcs[callee].returns:
                for v, r in zip(ret, res, strict=False):
                    g.moves[(sub, v)].append((path, r))
            todo.append((callee, sub))
    return g


def erasable_casts(text: str) -> tuple[Chain, ...]:
    """Every erasable chain of float converts in the StableHLO module ``text`` (module
    docstring), in the order of their second converts; ``()`` when there is none."""
    g = _instantiate(_parse(text))
    origin: dict[tuple, tuple[str, str, str]] = {}
    work = []
    for _, dst, a, b, _, line in g.converts:
        if loses_information(a, b):
            origin[dst] = (line, a, b)
            work.append(dst)
    while work:
        v = work.pop()
        for w in g.moves.get(v, ()):
            if w not in origin:
                origin[w] = origin[v]
                work.append(w)
    chains = {}
    for src, _, a, b, func, line in g.converts:
        if src in origin and a != b:
            first, s, mid = origin[src]
            chain = Chain(func, first, line, (s, mid, b))
            chains.setdefault(chain, None)  # once, however many call sites reach it
    return tuple(chains)
