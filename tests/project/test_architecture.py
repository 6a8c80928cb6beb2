"""The architecture of DESIGN §3: one namespace, import directions, single importers."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "kernels", "evidence", "bounds", "verify")
# the installed namespace: the folder contracts/ is the package kernel_contracts.contracts, ...
NAMESPACE = "kernel_contracts"

# package -> the packages of ours it may import
ALLOWED = {
    "contracts": set(),
    "kernels": {"contracts"},
    "evidence": {"contracts", "kernels"},
    "bounds": {"contracts"},
    "verify": {"contracts", "kernels", "evidence", "bounds"},
}

# third-party module -> the only package of ours allowed to import it
SOLE_IMPORTER = {
    "yaml": "contracts",
    "z3": "verify",
    "cvc5": "verify",
    "flax": "kernels",
    "jax.experimental.pallas": "kernels",
    "numba": "kernels",
    "llvmlite": "kernels",
    "pyarrow": "evidence",
    "transformers": "evidence",
    "safetensors": "kernels",
    "tokenizers": "kernels",
    "gguf": "kernels",
    "jinja2": "kernels",
}
# third-party module -> the only module of that package allowed to import it
SOLE_MODULE = {
    "numba": "kernels/measurement/measure_cpu.py",
    "llvmlite": "kernels/measurement/measure_cpu.py",
    "pyarrow": "evidence/logs/arrow.py",
    "transformers": "evidence/hooks/trl.py",
    "safetensors": "kernels/model/hf/checkpoint.py",
    "tokenizers": "kernels/model/hf/tokenizer.py",
    "gguf": "kernels/model/gguf/quants.py",
    "jinja2": "kernels/model/chat.py",
}


def _modules(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


# calls that import the module named by their first argument
_IMPORT_CALLS = {"import_module", "__import__", "run_module"}
# calls that import every module of a lazy table they are given (``contracts.lazy``)
_LAZY_CALLS = {"lazy_exports"}
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_ENTRY_POINT = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _leading_text(node: ast.AST) -> str | None:
    """The text a string expression starts with: "a.b", f"a.{x}" and "a." + x give "a."."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _leading_text(node.values[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _leading_text(node.left)
    return None


def _module_of(text: str | None) -> str | None:
    """The module a string names: "a.b", "a.b:function", "a." (a prefix) or "a.b ARGS"."""
    if not text:
        return None
    head = text.split()[0] if text.split() else ""
    head = head.split(":")[0].rstrip(".")
    return head if _MODULE.fullmatch(head) else None


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _string_imports(tree: ast.AST) -> list[tuple[str, int]]:
    """Modules named by strings that are imported: arguments of ``importlib.import_module``,
    ``__import__`` and ``runpy.run_module``; the argument after ``"-m"`` in a command list;
    ``"package.module:function"`` entry points; and, in a module that imports by a computed
    name (by hand or through ``lazy_exports``), lazy tables (dict literals whose values are all
    module names, as ``_EXPORTS``)."""
    found: list[tuple[str, int]] = []
    computed = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in _IMPORT_CALLS and node.args:
            name = _module_of(_leading_text(node.args[0]))
            if name is not None:
                found.append((name, node.lineno))
            computed |= not isinstance(node.args[0], ast.Constant)
        elif isinstance(node, ast.Call) and _call_name(node) in _LAZY_CALLS:
            computed = True
        elif isinstance(node, ast.List | ast.Tuple):
            for flag, arg in zip(node.elts, node.elts[1:], strict=False):
                if isinstance(flag, ast.Constant) and flag.value == "-m":
                    name = _module_of(_leading_text(arg))
                    if name is not None:
                        found.append((name, arg.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = _ENTRY_POINT.fullmatch(node.value)
            if m is not None:
                found.append((m[1], node.lineno))
    if computed:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict) or not node.values:
                continue
            texts = [v.value if isinstance(v, ast.Constant) else None for v in node.values]
            if all(isinstance(t, str) and _MODULE.fullmatch(t) for t in texts) and any(
                "." in t for t in texts
            ):
                found += [(t, v.lineno) for t, v in zip(texts, node.values, strict=True)]
    return found


def _imports(path: pathlib.Path) -> list[tuple[str, int]]:
    return list(_imports_of(_parse(path)))


@functools.cache
def _parse_text(text: str, filename: str) -> ast.AST:
    return ast.parse(text, filename=filename)


def _parse(path: pathlib.Path) -> ast.AST:
    """``path`` parsed; every test reads every module, so each text is parsed once."""
    return _parse_text(path.read_text(encoding="utf-8"), str(path))


def _ours(name: str) -> str:
    """``name`` with the namespace taken off (``kernel_contracts.kernels.ops`` is
    ``kernels.ops``); the rules below speak of the folders. A bare ``kernels.ops`` is left as it
    is: ``test_no_module_imports_a_bare_name`` rejects it."""
    return name.removeprefix(NAMESPACE + ".")


@functools.cache
def _imports_of(tree: ast.AST) -> tuple[tuple[str, int], ...]:
    return tuple((_ours(name), line) for name, line in _raw_imports(tree))


@functools.cache
def _raw_imports(tree: ast.AST) -> tuple[tuple[str, int], ...]:
    return _import_statements(tree) + tuple(_string_imports(tree))


@functools.cache
def _import_statements(tree: ast.AST) -> tuple[tuple[str, int], ...]:
    """The modules (and names) ``import`` and ``from ... import`` statements name, anywhere."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return tuple(found)


def test_every_package_has_modules():
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), package


def _bare_imports(path: pathlib.Path) -> list[str]:
    """Where the module at ``path`` imports one of our packages by its bare folder name
    (``import kernels``), which outside the repository root is another project's package. The
    one bare name allowed is ``verify`` itself, the launcher module of ``python -m verify``."""
    return [
        f"{path.name}:{line}: imports {name}"
        for name, line in _raw_imports(_parse(path))
        if _bare(name)
    ]


def _bare(name: str) -> bool:
    return name.split(".")[0] in PACKAGES and name != "verify"


# every folder of Python code users or the suite run, besides the five packages
CODE = (NAMESPACE, "launch", "tests", "bench", "examples", "notebooks")


def _code_strings(path: pathlib.Path) -> list[tuple[ast.AST, int]]:
    """The strings in ``path`` that are Python programs with an import (code a test hands to
    ``python -c`` or to a notebook kernel), parsed, with the line each starts on."""
    found = []
    for node in ast.walk(_parse(path)):
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and re.search(r"^\s*(from \w[\w.]* import|import \w)", text, re.M):
            try:
                found.append((ast.parse(text), node.lineno))
            except SyntaxError:
                continue
    return found


def test_no_module_imports_a_bare_name():
    """Code imports itself through the namespace (``from kernel_contracts import kernels``):
    ``import kernels`` finds Hugging Face's package wherever ours is installed. Programs held in
    strings (``python -c``) are read too; this file's own examples of bad code are not."""
    paths = [p for folder in (*PACKAGES, *CODE) for p in sorted((ROOT / folder).rglob("*.py"))]
    bad = [f"{p.relative_to(ROOT)}: {v}" for p in paths for v in _bare_imports(p)]
    for p in paths:
        if p.resolve() == pathlib.Path(__file__).resolve():
            continue
        for tree, line in _code_strings(p):
            names = [n for n, _ in _raw_imports(tree) if _bare(n)]
            bad += [f"{p.relative_to(ROOT)}:{line}: a program imports {n}" for n in names]
    assert len(paths) > 300 and bad == []


def _distribution() -> dict:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def test_the_distribution_maps_every_folder_into_the_namespace():
    """Every package folder is listed in pyproject.toml, under the namespace, and the folders
    map onto it: nothing the repository holds is left out of the wheel."""
    config = _distribution()
    folders = sorted(
        ".".join((NAMESPACE, *init.parent.relative_to(ROOT).parts))
        for package in PACKAGES
        for init in (ROOT / package).rglob("__init__.py")
    )
    data = [f"{NAMESPACE}.contracts.examples", f"{NAMESPACE}.kernels.checkpoints"]
    assert sorted(config["packages"]) == sorted([NAMESPACE, *folders, *data])
    assert config["package-dir"] == {
        "": "launch",
        NAMESPACE: NAMESPACE,
        **{f"{NAMESPACE}.{p}": p for p in PACKAGES},
    }
    assert config["py-modules"] == ["verify"]


@pytest.mark.parametrize("package", PACKAGES)
def test_import_directions(package):
    bad = []
    for path in _modules(package):
        for name, line in _imports(path):
            top = name.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    assert bad == []


# the rooms inside verify -> the rooms each may import (verify/__init__.py: one-way doors)
ROOMS = {
    "common": set(),
    "decide": {"common"},
    "proving": {"common", "decide"},
    "pipeline": {"common", "decide", "proving"},
    "diagnostics": {"common"},
    "cli": {"common", "decide", "proving", "pipeline", "diagnostics"},
}


def _room_violations(path: pathlib.Path, room: str) -> list[str]:
    """Where the module at ``path``, in ``room``, imports a room it may not."""
    bad = []
    for name, line in _imports(path):
        parts = name.split(".")
        inside = parts[0] == "verify" and len(parts) > 1 and parts[1] in ROOMS
        if inside and parts[1] != room and parts[1] not in ROOMS[room]:
            bad.append(f"{path.name}:{line}: imports {name}")
    return bad


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names(path: pathlib.Path) -> list[str]:
    """Where the module at ``path`` imports another module's private (``_``) name, or reads
    one from a module of ours it imported (``intervals._mul``)."""
    bad, modules = [], {}
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = _ours(node.module)
            for alias in node.names:
                if _private(alias.name):
                    bad.append(f"{path.name}:{node.lineno}: imports {module}.{alias.name}")
                elif module.split(".")[0] in PACKAGES or module == NAMESPACE:
                    modules[alias.asname or alias.name] = _ours(f"{module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name).split(".")[0] in PACKAGES and alias.asname:
                    modules[alias.asname] = _ours(alias.name)
    for node in ast.walk(_parse(path)):
        named = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if named and node.value.id in modules and _private(node.attr):
            bad.append(f"{path.name}:{node.lineno}: reads {modules[node.value.id]}.{node.attr}")
    return bad


def test_verify_is_built_of_rooms():
    rooms = {p.name for p in (ROOT / "verify").iterdir() if (p / "__init__.py").is_file()}
    loose = {p.name for p in (ROOT / "verify").glob("*.py")}
    assert rooms == set(ROOMS) and loose == {"__init__.py", "__main__.py"}


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_rooms_import_only_the_rooms_below_them(room):
    """A room imports only the rooms it may; the front door (``cli``) is imported by none."""
    bad = []
    for path in sorted((ROOT / "verify" / room).rglob("*.py")):
        bad += [f"{room}/{v}" for v in _room_violations(path, room)]
    assert bad == []


def test_no_module_in_verify_imports_a_private_name():
    bad = [f"{p.relative_to(ROOT)}: {v}" for p in _modules("verify") for v in _private_names(p)]
    assert bad == []


def test_the_main_command_has_one_body():
    """``python -m verify CONTRACT.yaml`` and a promotion stage run the same function, and only
    it runs a contract and renders its reports."""
    body = "verify.proving.command.verify_main"
    callers = {
        str(p.relative_to(ROOT))
        for p in _modules("verify")
        if any(name == body for name, _ in _imports(p))
    }
    assert callers == {"verify/cli/commands.py", "verify/pipeline/promotion/stage.py"}
    renders = {
        str(p.relative_to(ROOT))
        for p in _modules("verify")
        if any(name.endswith(".run_and_render") for name, _ in _imports(p))
        or "def run_and_render" in p.read_text(encoding="utf-8")
    }
    assert renders == {"verify/proving/command.py"}


# the rooms of kernels -> the rooms each may import (kernels/__init__.py); a room imports only
# rooms listed before it
KERNEL_ROOMS = {
    "numerics": set(),
    "_matmul": {"numerics"},
    "batching": set(),
    "attention": {"numerics", "batching"},
    "ops": {"numerics", "_matmul", "batching", "attention"},
    "model": {"numerics", "_matmul", "batching", "attention", "ops"},
    "measurement": {"numerics"},
    "diagnose": {"numerics", "_matmul", "batching", "attention", "ops", "model", "measurement"},
    "emulation": {"numerics", "ops", "model", "measurement", "diagnose"},
    "rl": {"numerics", "_matmul", "ops", "model", "measurement", "emulation"},
}


def _kernel_room(name: str) -> str | None:
    """The room of kernels a dotted module name falls in (``kernels.model.hf.decoder`` is in
    ``model``, ``kernels.ops`` is the room ``ops``), or ``None`` outside kernels' rooms."""
    parts = name.split(".")
    return (
        parts[1] if parts[0] == "kernels" and len(parts) > 1 and parts[1] in KERNEL_ROOMS else None
    )


def _kernel_room_violations(path: pathlib.Path) -> list[str]:
    here = _kernel_room(".".join(path.relative_to(ROOT).with_suffix("").parts))
    bad = []
    for name, line in _imports(path):
        there = _kernel_room(name)
        if here and there and there != here and there not in KERNEL_ROOMS[here]:
            bad.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    return bad


def test_kernels_is_built_of_rooms():
    """At most twelve entries at kernels' top: the rooms, the package face and the shipped
    checkpoints; every module lives in a room."""
    top = {p.name for p in (ROOT / "kernels").iterdir() if p.name != "__pycache__"}
    rooms = {f"{r}.py" if (ROOT / "kernels" / f"{r}.py").is_file() else r for r in KERNEL_ROOMS}
    assert top == rooms | {"__init__.py", "checkpoints"} and len(top) <= 12


@pytest.mark.parametrize("room", list(KERNEL_ROOMS))
def test_kernel_rooms_import_only_the_rooms_before_them(room):
    order = list(KERNEL_ROOMS)
    assert KERNEL_ROOMS[room] <= set(order[: order.index(room)])  # no circle between rooms
    where = ROOT / "kernels" / room
    paths = sorted(where.rglob("*.py")) if where.is_dir() else [where.with_suffix(".py")]
    assert [v for p in paths for v in _kernel_room_violations(p)] == []


def test_kernel_room_checker_sees_violations(tmp_path):
    (tmp_path / "kernels" / "measurement").mkdir(parents=True)
    bad = tmp_path / "kernels" / "measurement" / "m.py"
    bad.write_text(
        "from kernel_contracts.kernels.numerics.formats import flush\n"
        "from kernel_contracts.kernels.model.tinylm import TinyLM\n"
        "from kernel_contracts.kernels import ops\n"
        "from kernel_contracts.contracts import Contract\n",
        encoding="utf-8",
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = _kernel_room_violations(bad)
    finally:
        ROOT = saved
    assert found == [
        "kernels/measurement/m.py:2: imports kernels.model.tinylm",
        "kernels/measurement/m.py:2: imports kernels.model.tinylm.TinyLM",
        "kernels/measurement/m.py:3: imports kernels.ops",
    ]


def _statement_imports(path: pathlib.Path) -> set[str]:
    """The modules of ours an import statement of ``path`` names (at the top or inside a
    function; a ``-m`` in a command line starts another process and is no import)."""
    return {_ours(name) for name, _ in _import_statements(_parse(path))}


def _two_file_circles() -> list[str]:
    """Pairs of our modules that import each other (at the top or inside a function)."""
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for package in PACKAGES
        for p in _modules(package)
    }
    graph = {m: (_statement_imports(p) & modules.keys()) - {m} for m, p in modules.items()}
    return sorted(
        f"{a} <-> {b}"
        for a in graph
        for b in graph[a]
        if a < b and a in graph[b] and not (b.startswith(a + ".") or a.startswith(b + "."))
    )


# the circles that stay, each with the reason (repeated at the import inside a function)
CIRCLES_THAT_STAY: dict[str, str] = {
    "verify.pipeline.monitor.directory <-> verify.pipeline.monitor.stream": (
        "open_stream, which callers and tests import from stream, opens every kind of stream, "
        "directory streams included; the directory stream keeps its files' positions with "
        "stream's records (FileEntry, Position) and checks them with stream's content hashes, "
        "so that one file, followed alone or in a directory, is read and checked the same way"
    ),
}


def test_no_two_modules_import_each_other():
    """An import inside a function hides a circle; none is left but those named above with
    their reasons (a package and its own modules aside: the package face re-exports them)."""
    assert _two_file_circles() == sorted(CIRCLES_THAT_STAY)


def test_room_checker_sees_violations(tmp_path):
    """The room and private-name checks themselves must be able to fail."""
    bad = tmp_path / "m.py"
    bad.write_text(
        "import importlib\n"
        "from kernel_contracts.verify.cli.commands import main\n"
        "from kernel_contracts.verify.pipeline.promotion.chain import _read, link\n"
        'importlib.import_module("kernel_contracts.verify.diagnostics.localize")\n'
        "from kernel_contracts.verify.common.status import Status\n"
        "from kernel_contracts.verify import Status as S\n"
        "from kernel_contracts.verify.proving.solve import intervals\n"
        "intervals._mul(S, Status)\n",
        encoding="utf-8",
    )
    assert _room_violations(bad, "proving") == [
        "m.py:2: imports verify.cli.commands",
        "m.py:2: imports verify.cli.commands.main",
        "m.py:3: imports verify.pipeline.promotion.chain",
        "m.py:3: imports verify.pipeline.promotion.chain._read",
        "m.py:3: imports verify.pipeline.promotion.chain.link",
        "m.py:4: imports verify.diagnostics.localize",
    ]
    assert _room_violations(bad, "cli") == []
    assert _private_names(bad) == [
        "m.py:3: imports verify.pipeline.promotion.chain._read",
        "m.py:8: reads verify.proving.solve.intervals._mul",
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_string_imports_name_existing_modules(package):
    """A lazy table or ``import_module`` string of ours must name a module that exists."""
    bad = []
    for path in _modules(package):
        for raw, line in _string_imports(_parse(path)):
            name = _ours(raw)
            if name.split(".")[0] not in PACKAGES:
                continue
            where = ROOT.joinpath(*name.split("."))
            if not (where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()):
                bad.append(f"{path.relative_to(ROOT)}:{line}: names {name}")
    assert bad == []


@pytest.mark.parametrize("module", sorted(SOLE_IMPORTER))
def test_heavy_dependency_has_one_importer(module):
    owner = SOLE_IMPORTER[module]
    bad = []
    for package in PACKAGES:
        if package == owner:
            continue
        for path in _modules(package):
            for name, line in _imports(path):
                if name == module or name.startswith(module + "."):
                    bad.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    assert bad == []


@pytest.mark.parametrize("module", sorted(SOLE_MODULE))
def test_compiler_dependency_has_one_module(module):
    owner = ROOT / SOLE_MODULE[module]
    found = []
    for path in _modules(SOLE_IMPORTER[module]):
        for name, _ in _imports(path):
            if name == module or name.startswith(module + "."):
                found.append(path)
    assert found and set(found) == {owner}, found


def test_import_checker_sees_violations(tmp_path):
    """The checker itself must be able to fail: a module importing a forbidden package, by an
    import statement or by a string."""
    bad = tmp_path / "m.py"
    bad.write_text(
        "import importlib, subprocess, sys\n"
        "import kernel_contracts.verify.cli.commands\n"
        "from kernel_contracts.kernels import matmul\n"
        'importlib.import_module("kernel_contracts.bounds.apriori")\n'
        'importlib.import_module(f"kernel_contracts.verify.{sys.argv[1]}")\n'
        '__import__("kernel_contracts.kernels" + ".ops")\n'
        '_EXPORTS = {"run": "kernel_contracts.verify.proving.runner",\n'
        '            "Ops": "kernel_contracts.kernels.ops"}\n'
        'subprocess.run([sys.executable, "-m", "kernel_contracts.verify.proving.solve._worker"])\n'
        'ENTRY = "kernel_contracts.bounds.derive:derive"\n'
        'NOT_AN_IMPORT = {"key": "kernels.train", "note": "see kernels.matmul"}\n'
        '"""kernels.train is only a docstring here"""\n'
        "import kernels\n"
        'subprocess.run([sys.executable, "-m", "verify", "c.yaml"])\n',
        encoding="utf-8",
    )
    found = [(name, line) for name, line in _imports(bad) if name.split(".")[0] in PACKAGES]
    assert sorted(found) == sorted(
        [
            ("verify.cli.commands", 2),
            ("kernels", 3),
            ("kernels.matmul", 3),
            ("bounds.apriori", 4),
            ("verify", 5),
            ("kernels", 6),
            ("verify.proving.runner", 7),
            ("kernels.ops", 8),
            ("verify.proving.solve._worker", 9),
            ("bounds.derive", 10),
            ("kernels", 13),
            ("verify", 14),
        ]
    )
    assert _bare_imports(bad) == ["m.py:13: imports kernels"]


def test_lazy_tables_count_only_where_names_are_imported(tmp_path):
    """A table of module-like strings is an import only in a module that imports by name."""
    quiet = tmp_path / "q.py"
    quiet.write_text('SECTIONS = {"train": "kernels.train", "inf": "kernels.inference"}\n')
    assert _imports(quiet) == []
    lazy = tmp_path / "lazy.py"
    lazy.write_text(
        "from kernel_contracts.contracts.lazy import lazy_exports\n"
        '_EXPORTS = {"run": "kernel_contracts.verify.proving.runner"}\n'
        "__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)\n"
    )
    assert ("verify.proving.runner", 2) in _imports(lazy)


def _private_imports(package: str) -> list[str]:
    """Imports in ``package`` of another module's private name (``from m import _x``), and of
    another package's private module (``kernels._emulate``)."""
    found = []
    for path in _modules(package):
        here = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(_parse(path)):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            names = [a.name for a in node.names if a.name.startswith("_")]
            names = [n for n in names if not n.startswith("__")]
            if names and _ours(node.module) != here:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {names}")
        for name, line in _imports(path):
            outside = name.split(".")[0] in PACKAGES and name.split(".")[0] != package
            if outside and any(p.startswith("_") for p in name.split(".")):
                found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_name_is_imported_from_another_module(package):
    """No module imports another module's private ``_name``, nor another package's private
    module (``verify`` reaches the emulated matmul as ``kernels.matmul``, never through
    ``kernels._matmul``): what modules share is public."""
    assert _private_imports(package) == []


def test_every_lazy_package_loads_through_the_one_helper():
    """No package ``__init__`` writes its own module ``__getattr__``: the lazy ones (``kernels``,
    ``kernels.model.hf``, ``kernels.model.gguf``, ``kernels.rl``, ``verify``) take theirs from
    ``contracts.lazy.lazy_exports``."""
    own, shared = [], []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("__init__.py"):
            tree = _parse(path)
            if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
                own.append(str(path.relative_to(ROOT)))
            calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
            if any(_call_name(n) == "lazy_exports" for n in calls):
                shared.append(str(path.relative_to(ROOT)))
    assert own == []
    assert sorted(shared) == [
        "kernels/__init__.py",
        "kernels/model/gguf/__init__.py",
        "kernels/model/hf/__init__.py",
        "kernels/rl/__init__.py",
        "verify/__init__.py",
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves(package):
    module = importlib.import_module(f"{NAMESPACE}.{package}")
    assert module.__all__, package
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_name_is_shadowed_by_a_module(package):
    """A public name that is also a submodule's name would turn into the module once anything
    imports that submodule: such modules are private (``kernels.measurement._measure``)."""
    module = importlib.import_module(f"{NAMESPACE}.{package}")
    clashes = [
        name
        for name in module.__all__
        if (ROOT / package / f"{name}.py").is_file() or (ROOT / package / name).is_dir()
    ]
    assert clashes == []


def test_the_evidence_package_imports_no_jax():
    """Reading logs, summarising and deciding on them never loads JAX: only the emulate source
    does, on first use (the folder boundary of the proofs-and-logs path)."""
    modules = sorted(
        ".".join((NAMESPACE, *p.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")
        for p in _modules("evidence")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "from kernel_contracts.verify import decide, common\n"
        "from kernel_contracts.verify.proving import check\n"
        "from kernel_contracts.verify.pipeline import monitor, routing\n"
        "from kernel_contracts.verify.common import support\n"
        "from kernel_contracts.kernels.rl import weight_rules\n"  # a log's weights
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert len(modules) > 8 and out.stdout.strip() == "[]", out.stdout + out.stderr


_LOG_RUN = """
import io, sys
from kernel_contracts.verify.cli.commands import main
code = main(["c.yaml", "--json", "r.json", "--quiet"], stdout=io.StringIO(), stderr=sys.stderr)
print(code, sorted(m for m in sys.modules if m == "jax" or m.startswith("jax.")))
"""
_ESTIMATORS = """
guarantees:
  - {id: G1, quantity: pg_bias, score_norm: 5.0, advantage: 1.0, estimator: tis, cap: 2.0,
     max: 10.0, from: [N_is_cap]}
  - {id: G2, quantity: pg_bias, score_norm: 5.0, advantage: 1.0, estimator: geo_mask,
     band: [0.9, 1.1], max: 10.0, from: [N_is_cap]}
"""


def test_a_log_run_weighs_its_estimators_without_jax(tmp_path):
    """The shipped log contract with two estimators: the log is read, its clauses decided and
    its tokens weighed (the weight diagnostics in the report), and JAX is never imported."""
    examples = ROOT / "contracts" / "examples"
    text = (examples / "rollout-log.yaml").read_text(encoding="utf-8")
    (tmp_path / "c.yaml").write_text(text + _ESTIMATORS, encoding="utf-8")
    (tmp_path / "rollout-sample.jsonl").write_bytes(
        (examples / "rollout-sample.jsonl").read_bytes()
    )
    out = subprocess.run([sys.executable, "-c", _LOG_RUN], capture_output=True, text=True,
                         cwd=tmp_path, check=True)  # fmt: skip
    assert out.stdout == "1 []\n", out.stdout + out.stderr  # S_tv is violated on purpose
    (source,) = json.loads((tmp_path / "r.json").read_text())["evidence"]["sources"]
    assert set(source["weight_diagnostics"]) == {"tis(cap=2.0)", "geo_mask(band=[0.9, 1.1])"}
    assert source["weight_diagnostics"]["tis(cap=2.0)"]["ess_per_token"] > 0.9


def test_no_decision_depends_on_the_platform():
    """Verdicts, premise support, re-checks and bounds are functions of the measured numbers
    and the contract alone: no module that decides asks which machine or device it runs on
    (the measured values themselves are the kernels' concern, bit-exact on every backend)."""
    asks = re.compile(r"default_backend|\bplatform\b|\bdevices\(|local_devices|sys\.platform")
    paths = [*_modules("bounds"), *_modules("evidence"), ROOT / "verify/common/support.py"]
    paths += [p for room in ("decide", "proving/check", "pipeline/routing", "pipeline/promotion",
                             "pipeline/export")
              for p in (ROOT / "verify" / room).glob("*.py")]  # fmt: skip
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in paths
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if asks.search(line.split("#")[0])
    ]
    assert len(paths) > 40 and found == []
