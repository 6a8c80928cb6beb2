"""The architecture of DESIGN §3: import directions, single importers, and our own packages."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("contracts", "kernels", "bounds", "verify")

# package -> the packages of ours it may import
ALLOWED = {
    "contracts": set(),
    "kernels": {"contracts"},
    "bounds": {"contracts"},
    "verify": {"contracts", "kernels", "bounds"},
}

# third-party module -> the only package of ours allowed to import it
SOLE_IMPORTER = {
    "yaml": "contracts",
    "z3": "verify",
    "cvc5": "verify",
    "flax": "kernels",
    "jax.experimental.pallas": "kernels",
}


def _modules(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: pathlib.Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def test_every_package_has_modules():
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), package


@pytest.mark.parametrize("package", PACKAGES)
def test_import_directions(package):
    bad = []
    for path in _modules(package):
        for name, line in _imports(path):
            top = name.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
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


@pytest.mark.parametrize("package", PACKAGES)
def test_package_is_ours(package):
    """The four names are also unrelated distributions: the imported one must be this one."""
    module = importlib.import_module(package)
    where = pathlib.Path(module.__file__).resolve()
    assert where.parent.name == package
    # either this checkout (editable install) or an installed copy of kernel-contracts
    if ROOT not in where.parents:
        from importlib.metadata import files

        installed = {str(f) for f in files("kernel-contracts") or ()}
        assert f"{package}/__init__.py" in installed, where


def test_import_checker_sees_violations(tmp_path):
    """The checker itself must be able to fail: a module importing a forbidden package."""
    bad = tmp_path / "m.py"
    bad.write_text("import verify.cli\nfrom kernels import matmul\n", encoding="utf-8")
    names = [name for name, _ in _imports(bad)]
    assert "verify.cli" in names
    assert "kernels" in names


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves(package):
    module = importlib.import_module(package)
    assert module.__all__, package
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
