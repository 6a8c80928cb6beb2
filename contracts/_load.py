"""``load`` and ``loads``: a contract file (or its text) to a validated ``Contract``."""

from __future__ import annotations

import hashlib
import os

from kernel_contracts.contracts.bounded import NotRegularFile, read_regular
from kernel_contracts.contracts.document import MAX_BYTES, read_document
from kernel_contracts.contracts.errors import ContractError, Problem
from kernel_contracts.contracts.model import Contract
from kernel_contracts.contracts.validate import validate

__all__ = ["load", "loads"]


def load(path: str | os.PathLike) -> Contract:
    """Read, parse and validate the contract file at ``path``.

    Raises ``ContractError`` for any problem, file-level ones included (a missing file, an
    unreadable file, anything but a regular file: a directory, a FIFO, a device); ``str(err)``
    names the path exactly as it was given. A FIFO or device is refused, never read from.
    """
    shown = os.fspath(path)
    if isinstance(shown, bytes):
        shown = os.fsdecode(shown)
    try:
        data = read_regular(shown, MAX_BYTES + 1)
    except FileNotFoundError:
        raise ContractError([Problem(shown, None, None, "", "no such file")]) from None
    except NotRegularFile as e:
        message = f"is {e.kind}, not a contract file"
        raise ContractError([Problem(shown, None, None, "", message)]) from None
    except OSError as e:
        message = f"cannot read the file: {e.strerror or type(e).__name__}"
        raise ContractError([Problem(shown, None, None, "", message)]) from None
    return loads(data, path=shown)


def loads(text: str | bytes, path: str = "<string>") -> Contract:
    """Parse and validate contract ``text``; ``path`` names it in messages and resolves
    relative evidence paths (against the current directory for ``"<string>"``)."""
    if not isinstance(text, str | bytes):
        raise TypeError(f"loads() takes str or bytes, not {type(text).__name__}")
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    doc = read_document(text, path)
    base = os.getcwd() if path == "<string>" else os.path.dirname(os.path.abspath(path))
    return validate(doc, path=path, sha256=hashlib.sha256(raw).hexdigest(), base_dir=base)
