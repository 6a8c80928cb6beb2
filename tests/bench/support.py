"""Loading a script of ``bench/`` as a module (the scripts import their neighbours by name)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str):
    """The module ``bench/<name>.py``, with ``bench/`` importable while it loads."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
