"""How a followed file is known to still hold the bytes read from it, and where its rotated
copy is looked for: copy-truncate caught by content, not only by size.

A copy-truncate rotation (logrotate's ``copytruncate``) copies the file to ``NAME.1`` (or
``NAME-DATE``) and truncates it to zero bytes; the writer goes on at offset 0. When the file
grows past the offset read before the next poll, its size says nothing: only its bytes do.
So before any byte read from a followed file is used, and at every poll that finds no new
byte, ``still_holds`` checks that the file is at least as long as the bytes read and still
holds the first ``HEAD`` bytes read and the ``WINDOW`` bytes just before the read position
(``verify.pipeline.monitor.lines``).

Why a bounded check and not the sha256 of every byte read: re-hashing them at each poll costs
the whole file per poll (quadratic over a log's life). A truncated and rewritten file passes
the bounded check only if the writer put back, at the same byte positions, both the file's
first 4 KiB and the 4 KiB before the read position, byte for byte: a rollout log's records
carry sampled tokens and floating-point log-probs, so two stretches of it agree at both
places only when the same records were written again at the same offsets. The check runs
after each read and before its bytes are used, so a truncation that raced with a read is
seen by that read's own check. A restart still re-hashes every byte read (the checkpoint's
``digest``), and the copy a rotation left is accepted only on the sha256 of all the bytes
read (once per rotation).
"""

from __future__ import annotations

import os
import stat

__all__ = ["lost", "rotated_copies", "still_holds"]

_SEPARATORS = ".-_"  # after NAME in a rotated copy's name: NAME.1, NAME-20260101, NAME_1


def still_holds(fd: int, prefix: bytes, recent: bytes, read: int) -> bool:
    """Whether the open file ``fd`` still holds what was read from it: at least ``read``
    bytes, beginning with ``prefix`` and with ``recent`` just before ``read`` (two reads of
    at most 4 KiB each, whatever the file's size)."""
    if os.fstat(fd).st_size < read:
        return False
    if prefix and os.pread(fd, len(prefix), 0) != prefix:
        return False
    return not recent or os.pread(fd, len(recent), read - len(recent)) == recent


def rotated_copies(path: str, identity: tuple[int, int]) -> list[str]:
    """The regular files beside ``path`` that a rotation may have left: named as ``path``
    followed by ``.``, ``-`` or ``_`` and more (``live.jsonl.1``, ``live.jsonl-20260101``),
    other than the file ``identity`` (device, inode); the most recently modified first."""
    folder, name = os.path.split(path)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    found = []
    for other in names:
        if len(other) <= len(name) + 1 or not other.startswith(name):
            continue
        if other[len(name)] not in _SEPARATORS:
            continue
        full = os.path.join(folder, other)
        try:
            st = os.stat(full)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) != tuple(identity):
            found.append((-st.st_mtime_ns, other, full))
    return [full for _, _, full in sorted(found)]


def lost(path: str, offset: int, line: int) -> str:
    """The message for a file truncated behind the monitor with no copy of what was read."""
    return (
        f"{path}: the file was truncated (copy-truncate rotation?) and no copy that begins "
        f"with the {offset} bytes read was found beside it: lines written after line {line} "
        f"(from byte {offset}) before the truncation were not read and are lost"
    )
