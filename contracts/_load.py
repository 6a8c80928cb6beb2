"""``load`` and ``loads``: a contract file (or its text) to a validated ``Contract``."""

from __future__ import annotations

import hashlib
import os
import stat

from kernel_contracts.contracts.document import MAX_BYTES, read_document
from kernel_contracts.contracts.errors import ContractError, KernelContractsError, Problem
from kernel_contracts.contracts.model import Contract
from kernel_contracts.contracts.validate import validate

__all__ = ["NotRegularFile", "file_kind", "load", "loads", "read_regular"]


class NotRegularFile(KernelContractsError, OSError):
    """The path names something other than a regular file; ``kind`` says what, in words."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path}: is {kind}, not a regular file")
        self.filename, self.kind = path, kind
        self.strerror = f"is {kind}, not a regular file"

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``a directory``, ``a FIFO ...``)."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def read_regular(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path`` (symbolic links followed).

    Anything else (a directory, a FIFO, a device, a socket) raises ``NotRegularFile`` without
    being read: the path is looked at before it is opened, and opened non-blocking, so a FIFO
    put in its place meanwhile cannot block either. Other failures raise ``OSError``.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, file_kind(mode))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, file_kind(mode))
        return f.read(limit)


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
