"""One exception base: every exception class of the four packages derives from
``contracts.errors.KernelContractsError``.

Classes are found in the source (no module is imported for that, so the test stays fast): a
class is an exception when a base resolves to a built-in exception, to an exception class of
ours, or to a third-party class named ``*Error``, ``*Exception`` or ``*Warning``. Names are
resolved through each module's imports and the packages' re-exports. The runtime classes of
every module already imported are compared with what the source says, so the resolver is
checked against Python's own answer.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import pathlib
import sys

from kernel_contracts import contracts
from kernel_contracts.contracts.errors import KernelContractsError

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "kernels", "bounds", "verify")
BASE = "kernel_contracts.contracts.errors.KernelContractsError"
_THIRD_PARTY_SUFFIXES = ("Error", "Exception", "Warning")


def _module_name(path: pathlib.Path) -> str:
    parts = ["kernel_contracts", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, tuple[str, bool]]:
    """module name -> (source text, is a package)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[_module_name(path)] = (path.read_text(encoding="utf-8"), path.stem == "__init__")
    return out


class Index:
    """Each module's names (imports and classes) and each class's bases, from the source."""

    def __init__(self, sources: dict[str, tuple[str, bool]]):
        self.names: dict[str, dict[str, str]] = {}  # module -> local name -> dotted target
        self.classes: dict[str, tuple[list[str], int]] = {}  # dotted class -> (bases, line)
        for module, (text, is_package) in sources.items():
            self._read(module, ast.parse(text), is_package)

    def _read(self, module: str, tree: ast.Module, is_package: bool) -> None:
        names = self.names.setdefault(module, {})
        package = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        names[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        names[top] = top
            elif isinstance(node, ast.ImportFrom):
                origin = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join([*base, origin] if origin else base)
                for a in node.names:
                    names[a.asname or a.name] = f"{origin}.{a.name}"
            elif isinstance(node, ast.ClassDef):
                names.setdefault(node.name, f"{module}.{node.name}")
                # a nested class resolves its bases in module scope (none here does otherwise)
                self.classes[f"{module}.{node.name}"] = (
                    [self._dotted(module, b) for b in node.bases],
                    node.lineno,
                )

    def _dotted(self, module: str, node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            return f"@{module}:{node.id}"  # resolved later, once every module is read
        if isinstance(node, ast.Attribute):
            return f"{self._dotted(module, node.value)}.{node.attr}"
        return f"?{ast.unparse(node)}"

    def resolve(self, ref: str, seen: frozenset = frozenset()) -> str:
        """A dotted name for ``ref``: a class of ours where it leads to one, else its target."""
        if ref in seen:
            return ref
        if ref.startswith("@"):
            module, _, rest = ref[1:].partition(":")
            first, _, more = rest.partition(".")
            target = self.names.get(module, {}).get(first)
            if target is None:
                target = f"builtins.{first}" if hasattr(builtins, first) else f"?{first}"
            return self.resolve(f"{target}.{more}" if more else target, seen | {ref})
        if ref in self.classes:
            return ref
        module, _, name = ref.rpartition(".")
        if module in self.names and name in self.names[module]:  # a re-export
            target = self.names[module][name]
            if target != ref:
                return self.resolve(target, seen | {ref})
        return ref

    def ancestors(self, cls: str) -> set[str]:
        out, todo = set(), [cls]
        while todo:
            for base in self.classes.get(todo.pop(), ([], 0))[0]:
                dotted = self.resolve(base)
                if dotted not in out:
                    out.add(dotted)
                    todo.append(dotted)
        return out

    def is_exception(self, cls: str) -> bool:
        for a in self.ancestors(cls):
            if a.startswith("builtins."):
                value = getattr(builtins, a.removeprefix("builtins."), None)
                if isinstance(value, type) and issubclass(value, BaseException):
                    return True
            elif a not in self.classes and a.endswith(_THIRD_PARTY_SUFFIXES):
                return True
        return False

    def exceptions(self) -> list[str]:
        return sorted(c for c in self.classes if self.is_exception(c))


@functools.cache
def _index() -> Index:
    return Index(_sources())


def _outside_base(index: Index) -> list[str]:
    return [
        f"{c} (line {index.classes[c][1]})"
        for c in index.exceptions()
        if c != BASE and BASE not in index.ancestors(c)
    ]


def test_every_exception_class_derives_from_the_base():
    index = _index()
    found = index.exceptions()
    assert BASE in found and "kernel_contracts.contracts.errors.ContractError" in found
    assert _outside_base(index) == []


def test_the_base_is_exported_and_catches_a_contract_error():
    assert contracts.KernelContractsError is KernelContractsError
    assert issubclass(contracts.ContractError, KernelContractsError)
    err = contracts.ContractError([contracts.Problem("c.yaml", 1, 1, "name", "bad")])
    assert isinstance(err, KernelContractsError) and str(err) == "c.yaml:1:1: name: bad"


def test_source_index_agrees_with_the_runtime_classes():
    """For every module of ours already imported (contracts' always), the exception classes
    the source index finds are exactly the classes Python sees, bases and all."""
    for module in _sources():
        if module.startswith("kernel_contracts.contracts"):
            importlib.import_module(module)
    index = _index()
    found = set(index.exceptions())
    checked = 0
    for module in _sources():
        loaded = sys.modules.get(module)
        if loaded is None:
            continue
        for name, value in vars(loaded).items():
            if not (isinstance(value, type) and value.__module__ == module):
                continue
            dotted = f"{module}.{value.__qualname__}"
            if dotted not in index.classes:  # made at runtime (NamedTuple helpers and such)
                continue
            assert (dotted in found) == issubclass(value, BaseException), dotted
            if issubclass(value, BaseException):
                checked += 1
                assert (BASE in index.ancestors(dotted)) == (
                    issubclass(value, KernelContractsError) and value is not KernelContractsError
                ), name
    assert checked >= 4  # at least contracts' own: the base, ContractError and two more


def test_the_check_can_fail():
    """Chains through re-exports, aliases and relative imports are followed; a class outside
    the base is reported, and records that are not exceptions are left alone."""
    ns = "kernel_contracts"
    sources = {
        f"{ns}.contracts": (
            f"from {ns}.contracts.errors import KernelContractsError as Base\n",
            True,
        ),
        f"{ns}.contracts.errors": ("class KernelContractsError(Exception):\n    pass\n", False),
        f"{ns}.verify": ("", True),
        f"{ns}.verify.a": (
            f"from {ns}.contracts import Base\n"
            "class Good(Base, ValueError): ...\n"
            "class Bad(LookupError): ...\n",
            False,
        ),
        f"{ns}.verify.b": (
            "import yaml\n"
            "from typing import NamedTuple\n"
            "from .a import Good, Bad\n"
            "from . import a as alias\n"
            "class Fine(Good): ...\n"
            "class AlsoBad(alias.Bad): ...\n"
            "class YamlBad(yaml.YAMLError): ...\n"
            "class Record(NamedTuple):\n    x: int\n",
            False,
        ),
    }
    index = Index(sources)
    assert index.exceptions() == [
        f"{ns}.contracts.errors.KernelContractsError",
        f"{ns}.verify.a.Bad",
        f"{ns}.verify.a.Good",
        f"{ns}.verify.b.AlsoBad",
        f"{ns}.verify.b.Fine",
        f"{ns}.verify.b.YamlBad",
    ]
    assert _outside_base(index) == [
        f"{ns}.verify.a.Bad (line 3)",
        f"{ns}.verify.b.AlsoBad (line 6)",
        f"{ns}.verify.b.YamlBad (line 7)",
    ]
