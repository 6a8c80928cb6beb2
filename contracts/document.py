"""Reading a contract file into plain values with the line and column of every key path.

This is the only module of the project that imports the YAML library. It reads a safe subset
of YAML: mappings, sequences and the scalars of the YAML 1.2 core schema (``1e-3`` is a number,
``yes``/``no``/``on``/``off`` are strings, ``.inf``/``.nan`` are non-finite numbers that the
validator rejects). Python tags and every other tag are refused. It defends against hostile
input: files over ``MAX_BYTES``, nesting deeper than ``MAX_DEPTH``, and alias bombs (the node
graph is walked with a budget of ``MAX_NODES`` values, so expansion is bounded in time and
memory), and it rejects duplicate mapping keys and YAML merge keys.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from types import MappingProxyType

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from kernel_contracts.contracts.bounded import LIMITS
from kernel_contracts.contracts.errors import KernelContractsError, Problem

__all__ = ["INVALID", "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "Document", "read_document"]

MAX_BYTES = LIMITS["contract"]  # 1 MiB
MAX_DEPTH = 64
MAX_NODES = 20_000

_Y = "tag:yaml.org,2002:"
_NULL, _BOOL, _INT, _FLOAT, _STR = (_Y + t for t in ("null", "bool", "int", "float", "str"))
_SEQ, _MAP = _Y + "seq", _Y + "map"

_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_FLOAT_RE = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF_RE = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_NAN_RE = re.compile(r"^\.(?:nan|NaN|NAN)$")


class _Invalid:
    """A value that was already reported as a problem; validators skip it silently."""

    def __repr__(self) -> str:
        return "<invalid>"


INVALID = _Invalid()


class _CoreResolver(BaseResolver):
    """Implicit scalar types of the YAML 1.2 core schema (not PyYAML's YAML 1.1 ones)."""


_CoreResolver.add_implicit_resolver(
    _NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_CoreResolver.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_CoreResolver.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))
_CoreResolver.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))
_CoreResolver.add_implicit_resolver(_FLOAT, _INF_RE, list("-+."))
_CoreResolver.add_implicit_resolver(_FLOAT, _NAN_RE, ["."])


class _TooBig(KernelContractsError):
    def __init__(self, mark, message: str):
        super().__init__(message)
        self.mark = mark
        self.message = message


class _Loader(Reader, Scanner, Parser, Composer, _CoreResolver):
    """PyYAML's pure-Python parser and composer with a nesting limit; no constructor at all."""

    def __init__(self, text: str):
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _CoreResolver.__init__(self)
        self._depth = 0
        self._count = 0

    def compose_node(self, parent, index):
        self._depth += 1
        self._count += 1
        try:
            if self._depth > MAX_DEPTH:
                message = f"the document nests deeper than {MAX_DEPTH} levels"
                raise _TooBig(self.peek_event().start_mark, message)
            if self._count > MAX_NODES:
                message = f"the document holds more than {MAX_NODES} values"
                raise _TooBig(self.peek_event().start_mark, message)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


@dataclass(frozen=True)
class Document:
    """A parsed file: plain values (``INVALID`` when unusable), key-path locations, problems."""

    tree: object
    locations: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    root: tuple[int, int] = (1, 1)
    problems: tuple[Problem, ...] = ()


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _decode(data: bytes | str, path: str) -> tuple[str | None, Problem | None]:
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        message = f"the file is larger than {MAX_BYTES} bytes (1 MiB), the limit for a contract"
        return None, Problem(path, 1, 1, "", message)
    if isinstance(data, str):
        return data.removeprefix("\ufeff"), None
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        message = f"the file is not valid UTF-8 (byte 0x{data[e.start]:02x})"
        return None, Problem(path, line, col, "", message)


def _yaml_problem(e: yaml.YAMLError, text: str, path: str) -> Problem:
    if isinstance(e, yaml.reader.ReaderError):
        line, col = _position(text, e.position) if isinstance(e.position, int) else (1, 1)
        char = e.character if isinstance(e.character, str) else chr(e.character)
        return Problem(
            path,
            line,
            col,
            "",
            f"the file holds the character U+{ord(char):04X}, which YAML does not allow",
        )
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = getattr(e, "problem", None)
    context = getattr(e, "context", None)
    context_mark = getattr(e, "context_mark", None)
    if problem is None:
        message = f"invalid YAML: {context or e}"
    elif context and not context.startswith("while"):
        message = f"invalid YAML: {context}, {problem}"
    elif context and context_mark is not None:
        message = f"invalid YAML: {problem} ({context} at line {context_mark.line + 1})"
    elif context:
        message = f"invalid YAML: {problem} ({context})"
    else:
        message = f"invalid YAML: {problem}"
    return Problem(path, line, col, "", message)


def read_document(data: bytes | str, path: str) -> Document:
    """Parse ``data`` (the bytes or text of the file at ``path``) into a ``Document``."""
    text, problem = _decode(data, path)
    if text is None:
        return Document(INVALID, problems=(problem,))
    loader = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
    except _TooBig as e:
        problem = Problem(path, e.mark.line + 1, e.mark.column + 1, "", e.message)
        return Document(INVALID, problems=(problem,))
    except yaml.YAMLError as e:
        return Document(INVALID, problems=(_yaml_problem(e, text, path),))
    except ValueError:  # PyYAML's chr() refuses a \U escape above U+10FFFF
        mark = loader.get_mark()  # at the escape's hex digits, two past its backslash
        message = "invalid YAML: the escape names no Unicode character (it is above U+10FFFF)"
        return Document(
            INVALID, problems=(Problem(path, mark.line + 1, mark.column - 1, "", message),)
        )
    finally:
        if loader is not None:
            loader.dispose()
    if root is None or (isinstance(root, ScalarNode) and root.tag == _NULL and not root.value):
        message = "the file is empty; a contract needs at least the keys contract, name, kernels"
        return Document(INVALID, problems=(Problem(path, 1, 1, "", message),))
    builder = _Builder(path)
    start = (root.start_mark.line + 1, root.start_mark.column + 1)
    try:
        tree = builder.value(root, "", 1)
    except _Abort as e:
        return Document(
            INVALID, MappingProxyType(builder.locations), start, (*builder.problems, e.problem)
        )
    return Document(tree, MappingProxyType(builder.locations), start, tuple(builder.problems))


class _Abort(KernelContractsError):
    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return {_NULL: "null", _BOOL: "boolean", _INT: "integer", _FLOAT: "number"}.get(
        node.tag, "string"
    )


def _not_text(text: str) -> str | None:
    """Why a string (escapes resolved) is not printable Unicode text, as "holds ..."; ``None``
    when it is.

    An escape can write what the file itself may not hold: a surrogate (``"\\ud800"``, which
    no UTF-8 file, report or terminal can carry) or a control character such as NUL.
    """
    found = Reader.NON_PRINTABLE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    if 0xD800 <= code <= 0xDFFF:
        return (
            f"holds U+{code:04X}, a surrogate code point, which is not Unicode text (write the "
            "character itself or a \\U escape)"
        )
    return f"holds the character U+{code:04X}, which is not printable text"


def _trim(key: str) -> str:
    """``key`` without its trailing list indices (an alias chain can make thousands)."""
    return re.sub(r"(?:\[[0-9]+\])+$", "", key)


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_Y) :] if tag.startswith(_Y) else tag


class _Builder:
    """Walks the composed node graph into dicts, lists and scalars, recording locations."""

    def __init__(self, path: str):
        self.path = path
        self.locations: dict[str, tuple[int, int]] = {}
        self.problems: list[Problem] = []
        self.count = 0

    def _at(self, node: Node) -> tuple[int, int]:
        return node.start_mark.line + 1, node.start_mark.column + 1

    def problem(self, node: Node, key: str, message: str) -> _Invalid:
        self.problems.append(Problem(self.path, *self._at(node), key, message))
        return INVALID

    def value(self, node: Node, key: str, depth: int) -> object:
        self.count += 1
        if self.count > MAX_NODES:
            message = (
                f"the document holds more than {MAX_NODES} values once aliases are "
                "expanded; aliases may not multiply content"
            )
            raise _Abort(Problem(self.path, *self._at(node), _trim(key), message))
        if depth > MAX_DEPTH:
            message = f"the document nests deeper than {MAX_DEPTH} levels (through aliases)"
            raise _Abort(Problem(self.path, *self._at(node), _trim(key), message))
        if isinstance(node, MappingNode):
            if node.tag != _MAP:
                return self.problem(node, key, f"unsupported tag '{_short_tag(node.tag)}'")
            return self._mapping(node, key, depth)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                return self.problem(node, key, f"unsupported tag '{_short_tag(node.tag)}'")
            items = []
            for i, item in enumerate(node.value):
                self.locations.setdefault(f"{key}[{i}]", self._at(item))
                items.append(self.value(item, f"{key}[{i}]", depth + 1))
            return items
        return self._scalar(node, key)

    def _mapping(self, node: MappingNode, key: str, depth: int) -> dict:
        out: dict[str, object] = {}
        first: dict[str, Node] = {}
        for key_node, value_node in node.value:
            self.count += 1
            name = self._key(key_node, key)
            if name is None:
                continue
            sub = f"{key}.{name}" if key else name
            if name in first:
                line = first[name].start_mark.line + 1
                self.problem(key_node, sub, f"duplicate key '{name}'; first given at line {line}")
                self.value(value_node, sub, depth + 1)  # its own problems, if any, still count
                continue
            first[name] = key_node
            self.locations.setdefault(sub, self._at(key_node))
            out[name] = self.value(value_node, sub, depth + 1)
        return out

    def _key(self, node: Node, parent: str) -> str | None:
        if not isinstance(node, ScalarNode):
            self.problem(node, parent, f"keys must be strings, got {_kind(node)}")
            return None
        if node.tag == _STR:
            if node.value == "<<" and node.style is None:
                self.problem(node, parent, "merge keys (<<) are not supported; write the keys out")
                return None
            why = _not_text(node.value)
            if why is not None:
                self.problem(node, parent, f"the key {why}")
                return None
            return node.value
        if node.tag in (_NULL, _BOOL, _INT, _FLOAT):
            self.problem(node, parent, f"keys must be strings, got {_kind(node)} {node.value}")
        else:
            self.problem(node, parent, f"unsupported tag '{_short_tag(node.tag)}'")
        return None

    def _scalar(self, node: ScalarNode, key: str) -> object:
        text, tag = node.value, node.tag
        if tag == _STR:
            why = _not_text(text)
            return text if why is None else self.problem(node, key, f"the string {why}")
        if tag == _NULL:
            if text not in ("", "~", "null", "Null", "NULL"):
                return self.problem(node, key, f"'{text}' is not null")
            return None
        if tag == _BOOL:
            if text.lower() not in ("true", "false"):
                return self.problem(node, key, f"'{text}' is not true or false")
            return text.lower() == "true"
        if tag == _INT:
            if not _INT_RE.match(text):
                return self.problem(node, key, f"'{text}' is not an integer")
            try:
                return int(text)
            except ValueError:
                return self.problem(node, key, "the integer has too many digits")
        if tag == _FLOAT:
            return self._float(node, key, text)
        return self.problem(node, key, f"unsupported tag '{_short_tag(tag)}'")

    def _float(self, node: ScalarNode, key: str, text: str) -> object:
        if _NAN_RE.match(text):
            return float("nan")
        if _INF_RE.match(text):
            return float("-inf") if text.startswith("-") else float("inf")
        if not _FLOAT_RE.match(text):
            return self.problem(node, key, f"'{text}' is not a number")
        value = float(text)
        try:
            written = Decimal(text)
        except InvalidOperation:  # pragma: no cover - the pattern above admits only decimals
            return self.problem(node, key, f"'{text}' is not a number")
        if value in (float("inf"), float("-inf")):
            return self.problem(node, key, f"{text} is too large for a double-precision number")
        if value == 0 and written != 0:
            return self.problem(node, key, f"{text} is too small for a double-precision number")
        if written != Decimal(repr(value)):
            return self.problem(
                node,
                key,
                f"{text} has more digits than a double-precision number holds "
                f"(it would be read as {value!r})",
            )
        return value
