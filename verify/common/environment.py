"""Whether ``import kernels`` finds this toolkit's package.

``kernels`` is also the name of another project's package (the Hugging Face compute-kernel hub
client, which transformers 5 requires). Where both are installed, the one Python finds first
wins: with an editable install that is the other project's, unless the command runs from this
project's root; with a regular install the two share one folder. Then the emulated kernels
cannot load, and the command line says so instead of an unexplained internal error.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

__all__ = ["OURS", "foreign_kernels"]

OURS = Path(__file__).resolve().parents[2] / "kernels" / "__init__.py"


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def foreign_kernels() -> str | None:
    """Why ``import kernels`` would not load this toolkit's ``kernels``, or ``None`` when it
    would. Imports nothing."""
    spec = importlib.util.find_spec("kernels")
    found = Path(spec.origin) if spec is not None and spec.origin else None
    other = (
        "another project's package named kernels (the PyPI project 'kernels', which "
        "transformers 5 requires)"
    )
    if found is None:
        return f"the package kernels is missing from this installation ({OURS.parent})"
    if not _same(found, OURS):
        return (
            f"'import kernels' finds {found.parent}, {other}, before this toolkit's "
            f"{OURS.parent}: run from {OURS.parent.parent}, or use an environment without it"
        )
    try:
        theirs = metadata.distribution("kernels")
    except metadata.PackageNotFoundError:
        return None
    if _same(Path(str(theirs.locate_file("kernels/__init__.py"))), OURS):
        return (
            f"{OURS.parent} holds both this toolkit's kernels and {other}: install "
            "kernel-contracts in an environment without it"
        )
    return None
