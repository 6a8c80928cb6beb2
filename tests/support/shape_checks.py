"""The type checker the test suite applies to the shape-annotated modules (see conftest.py).

beartype with the numeric tower of PEP 484 (an ``int`` is accepted where a ``float`` is
annotated, as Python's own typing rules say), wrapped by jaxtyping's import hook so that each
call also checks the named dimensions of its array arguments and result.
"""

from __future__ import annotations

import os
import pathlib
import re

from beartype import BeartypeConf, beartype

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "kernels", "evidence", "bounds", "verify")
SHAPE_CHECKS = os.environ.get("KERNEL_CONTRACTS_SHAPE_CHECKS", "1") != "0"

typechecker = beartype(conf=BeartypeConf(is_pep484_tower=True))


def shape_annotated_modules() -> list[str]:
    """The modules of the five packages that import ``jaxtyping`` (their array functions carry
    shape annotations), as dotted names in the ``kernel_contracts`` namespace. A module that
    compiles its functions with Numba is left out: Numba compiles (and caches) the functions
    themselves, not a checking wrapper."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text("utf-8")
            if re.search(r"^(from jaxtyping|import jaxtyping)", text, re.M) and not re.search(
                r"^(from numba|import numba)", text, re.M
            ):
                parts = ("kernel_contracts", *path.relative_to(ROOT).with_suffix("").parts)
                found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found
