"""Where the command line writes its reports: every target checked before any work is done, and
all of them written at the end, all or nothing.

What a report path may name (``prepare`` decides, before anything is computed):

- a regular file, or a new file in an existing directory: replaced atomically. A symbolic
  link is followed and the file it points to is replaced (the link stays a link). A replaced
  file keeps its permission bits; a new one gets those of a plain ``open`` (0666 less the
  umask). A read-only file is refused.
- a character device (``/dev/null``, a terminal) or a FIFO: written through directly, never
  replaced. A FIFO must already have a reader, or it is refused (the run would wait forever).
- ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``: that open descriptor of this process, as a
  shell redirection would write it (a report lands in the file stdout is redirected to,
  beside the summary, instead of replacing that file).
- anything else (a directory, a socket, a block device) is refused. So is a path that names
  an input (the contract, an evidence file) or the same file as another report, however it is
  spelt: relative or absolute, through a symbolic link, or as a hard link.

``Plan.write`` renders nothing: it takes every text at once, writes each file report to a
temporary file beside its target, then the devices and FIFOs, and only when all of that has
succeeded moves the temporaries into place. A failure before that removes every temporary and
leaves every old file as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import re
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from kernel_contracts.contracts import KernelContractsError, file_kind

__all__ = ["OutputError", "Plan", "Target", "prepare", "refuse_inputs"]

_DESCRIPTORS = {"/dev/stdout": 1, "/dev/stderr": 2}
_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")


class OutputError(KernelContractsError, ValueError):
    """An output that cannot be used or written; ``str`` is the one-line message (exit 2)."""


@dataclass(frozen=True)
class Target:
    """One report's destination, as ``prepare`` resolved it."""

    label: str  # the option that named it, e.g. "--json"
    path: str  # as given
    how: str  # "replace" (a regular or new file) | "stream" (device, FIFO) | "descriptor"
    where: str  # the file replaced (symbolic links resolved); the path itself otherwise
    key: tuple  # the file's identity: (device, inode), or ("new", where) for a new file
    mode: int  # the permission bits a replaced or new file gets (unused otherwise)
    fd: int | None = None  # open for writing: a stream (owned) or a descriptor (borrowed)


def _fail(path: str, why: str) -> OutputError:
    return OutputError(f"cannot write {path}: {why}")


def _identity(path: str) -> tuple:
    """The identity of the file ``path`` names (symbolic links followed)."""
    try:
        st = os.stat(path)
    except OSError:
        return ("new", os.path.realpath(path))
    return (st.st_dev, st.st_ino)


def _descriptor(path: str) -> int | None:
    absolute = os.path.normpath(os.path.abspath(path))
    if absolute in _DESCRIPTORS:
        return _DESCRIPTORS[absolute]
    match = _FD_PATH.fullmatch(absolute)
    return int(match.group(1)) if match else None


def _umask_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _borrow(label: str, path: str, fd: int) -> Target:
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        st = os.fstat(fd)
    except OSError as err:
        raise _fail(path, err.strerror or str(err)) from None
    if flags & os.O_ACCMODE not in (os.O_WRONLY, os.O_RDWR):
        raise _fail(path, f"descriptor {fd} is not open for writing")
    return Target(label, path, "descriptor", path, (st.st_dev, st.st_ino), 0, fd)


def _open_stream(label: str, path: str) -> Target:
    flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise _fail(path, "a FIFO (named pipe) with no reader") from None
        raise _fail(path, err.strerror or str(err)) from None
    st = os.fstat(fd)
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):  # swapped meanwhile
        os.close(fd)
        raise _fail(path, f"is {file_kind(st.st_mode)}")
    os.set_blocking(fd, True)
    return Target(label, path, "stream", path, (st.st_dev, st.st_ino), 0, fd)


def _target(label: str, path: str) -> Target:
    fd = _descriptor(path)
    if fd is not None:
        return _borrow(label, path, fd)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise _fail(path, err.strerror or str(err)) from None
    if st is None and path.endswith(("/", os.sep)):
        raise _fail(path, "names a directory")
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        return _open_stream(label, path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise _fail(path, f"is {file_kind(st.st_mode)}")
    where = os.path.realpath(path)
    directory = os.path.dirname(where)
    if not os.path.isdir(directory):
        raise _fail(path, "no such directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise _fail(path, f"the directory {directory} is not writable")
    if st is None:
        return Target(label, path, "replace", where, ("new", where), _umask_mode())
    if not os.access(where, os.W_OK):
        raise _fail(path, "the file is read-only")
    return Target(label, path, "replace", where, (st.st_dev, st.st_ino), st.st_mode & 0o777)


class Plan:
    """The checked targets of one run; ``write`` them all at the end, or ``close`` unwritten.

    Streams are opened by ``prepare`` (a FIFO's reader would otherwise see the end of its
    input), so a plan is used as a context manager that closes them.
    """

    def __init__(self, targets: Sequence[Target]):
        self.targets = tuple(targets)

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for t in self.targets:
            if t.how == "stream" and t.fd is not None:
                with contextlib.suppress(OSError):
                    os.close(t.fd)
        self.targets = tuple(dataclasses.replace(t, fd=None) for t in self.targets)

    def write(self, texts: Sequence[str]) -> None:
        """Write ``texts[i]`` to ``targets[i]``, all or nothing (see the module docstring);
        raises ``OutputError`` naming the path that failed."""
        if len(texts) != len(self.targets):
            raise ValueError(f"{len(texts)} texts for {len(self.targets)} targets")
        pending: list[tuple[str, Target]] = []
        current = None
        try:
            for t, text in zip(self.targets, texts, strict=True):
                if t.how == "replace":
                    current = t
                    pending.append((_temporary(t, text), t))
            for t, text in zip(self.targets, texts, strict=True):
                if t.how != "replace":
                    current = t
                    _write_fd(t, text)
            while pending:
                current = pending[0][1]
                os.replace(pending[0][0], current.where)
                pending.pop(0)
        except OSError as err:
            raise _fail(current.path, err.strerror or str(err)) from None
        finally:
            for tmp, _ in pending:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            self.close()


def _temporary(t: Target, text: str) -> str:
    """``text`` in a complete, synced temporary file beside ``t.where``, with ``t.mode``."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=os.path.dirname(t.where))
    f = None
    try:
        os.fchmod(fd, t.mode)
        f = os.fdopen(fd, "w", encoding="utf-8")
        with f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        if f is None:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _write_fd(t: Target, text: str) -> None:
    data = memoryview(text.encode("utf-8"))
    while data:
        data = data[os.write(t.fd, data) :]


def prepare(outputs: Sequence[tuple[str, str]], inputs: Sequence[tuple[str, str]] = ()) -> Plan:
    """Check the report paths ``outputs`` ((option, path) pairs, ``None`` paths skipped) before
    any work: each must be writable and name neither one of ``inputs`` ((what, path) pairs,
    e.g. ``("the contract", "c.yaml")``) nor the file of another output. Raises
    ``OutputError`` with the first problem; streams opened so far are closed again."""
    plan = Plan([])
    try:
        for label, path in outputs:
            if path is None:
                continue
            t = _target(label, path)
            plan.targets += (t,)
            for other in plan.targets[:-1]:
                if other.key == t.key:
                    raise _fail(path, f"{other.label} {other.path} is the same file; each "
                                "report needs a file of its own")  # fmt: skip
        refuse_inputs(plan, inputs)
    except BaseException:
        plan.close()
        raise
    return plan


def refuse_inputs(plan: Plan, inputs: Sequence[tuple[str, str]]) -> None:
    """Raise ``OutputError`` if a target of ``plan`` is one of ``inputs`` ((what, path))."""
    for what, path in inputs:
        key = _identity(path)
        for t in plan.targets:
            if t.key == key:
                raise _fail(t.path, f"it is {what} ({path}); a report never overwrites its input")
