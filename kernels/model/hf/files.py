"""The files of a checkpoint folder, each read only after the checks of ``contracts.bounded``.

A file a checkpoint folder holds or names (``config.json``, ``tokenizer.json``, the index, the
shards its ``weight_map`` lists) must be a regular file inside the folder (no ``..``, no
absolute path, no symbolic link out of it) and under the limit of its kind; every refusal, and
every file that cannot be read, is a ``CheckpointError`` naming the file.
"""

from __future__ import annotations

import json
import os
from typing import Any, BinaryIO

from kernel_contracts.contracts.bounded import LIMITS, UnsafeFile, inside, open_regular, read_file
from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem

__all__ = ["open_in", "read_json", "read_text", "refused"]


def refused(path: str, key: str, err: OSError) -> CheckpointError:
    """The ``CheckpointError`` for the file ``path`` (at ``key``) that could not be opened:
    missing, refused by ``contracts.bounded`` (at the path it names) or unreadable."""
    if isinstance(err, FileNotFoundError):
        return CheckpointError([CheckpointProblem(path, key, "no such file")])
    if isinstance(err, UnsafeFile):
        return CheckpointError([CheckpointProblem(err.filename, key, err.strerror)])
    why = err.strerror or type(err).__name__
    return CheckpointError([CheckpointProblem(path, key, f"cannot read: {why}")])


def read_text(folder: str, name: str, kind: str, key: str = "") -> str:
    """The UTF-8 text of ``folder/name``, a file of ``kind`` (a key of ``LIMITS``);
    ``CheckpointError`` at ``key`` when it is refused or cannot be read."""
    path = os.path.join(folder, name)
    try:
        data = read_file(name, LIMITS[kind], folder=folder)
    except OSError as err:
        raise refused(path, key, err) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        message = f"not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})"
        raise CheckpointError([CheckpointProblem(path, key, message)]) from None


def read_json(folder: str, name: str, kind: str) -> Any:
    """The JSON value in ``folder/name``, a file of ``kind``; ``CheckpointError`` naming the
    file when it is refused, cannot be read or is not JSON."""
    path = os.path.join(folder, name)
    text = read_text(folder, name, kind)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, an integer too long
        why = str(err) if not isinstance(err, RecursionError) else "nested too deeply"
        problem = CheckpointProblem(path, "", f"cannot read as JSON: {why}")
        raise CheckpointError([problem]) from None


def open_in(folder: str, name: str, kind: str, key: str = "") -> BinaryIO:
    """``folder/name`` opened for reading after the checks; ``CheckpointError`` otherwise."""
    path = os.path.join(folder, name)
    try:
        return open_regular(inside(folder, name), LIMITS[kind])
    except OSError as err:
        raise refused(path, key, err) from None
