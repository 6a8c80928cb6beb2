"""Lazy re-exports for a package ``__init__``: each public name is imported on first use.

A package whose submodules are heavy (JAX, sympy, z3) keeps its import light by naming, in one
table, the submodule that defines each public name::

    _EXPORTS = {"measure": "kernel_contracts.kernels.measurement._measure", ...}
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

This module imports nothing of ours, so every package may use it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (PEP 562).

    ``exports`` maps each lazily exported name to the module that defines it. The first access
    imports that module and caches the value on the package; any other name raises the usual
    ``AttributeError``. Call it from the package's own ``__init__`` (``lazy_exports(__name__,
    table)``), while the package is being imported.
    """
    module = sys.modules[package]

    def __getattr__(name: str) -> object:
        source = exports.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(getattr(module, "__all__", ())) | set(exports))

    return __getattr__, __dir__
