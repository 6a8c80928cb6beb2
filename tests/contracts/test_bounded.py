"""``contracts.bounded``: a file is read only as a regular file, under the limit of its kind,
and (for a name found in a folder) inside that folder; a line-oriented file a line at a time,
never more than one bounded line held."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from kernel_contracts.contracts import bounded
from kernel_contracts.contracts.bounded import (
    LIMITS,
    LongLine,
    NotRegularFile,
    OutsideFolder,
    TooLarge,
    UnsafeFile,
    bounded_lines,
    check_file,
    inside,
    open_regular,
    read_file,
    size_text,
)
from tests.support.guard import finishes


def test_every_limit_is_a_positive_whole_unit():
    assert LIMITS["contract"] == 1 << 20
    assert {"config", "index", "tokenizer", "weights", "log", "log_record"} <= set(LIMITS)
    for limit in LIMITS.values():
        assert limit > 0 and size_text(limit).endswith(("KiB", "MiB", "GiB", "TiB"))
    assert size_text(1536 << 10) == "1536 KiB" and size_text(7) == "7 bytes"


@pytest.mark.parametrize("reader", [check_file, open_regular, read_file])
def test_a_fifo_a_device_and_a_directory_are_refused_unread(tmp_path, reader):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "dir").mkdir()
    for name, kind in [
        ("fifo", "a FIFO (named pipe)"),
        ("zero", "a character device"),
        ("dir", "a directory"),
    ]:
        path = str(tmp_path / name)
        err = finishes(lambda p=path: reader(p, 1 << 20), tmp_path / "fifo")
        assert isinstance(err, NotRegularFile) and isinstance(err, OSError), err
        assert str(err) == f"{path}: is {kind}, not a regular file"
        assert (err.filename, err.kind) == (path, kind)


def test_a_file_over_its_limit_is_refused_before_a_byte_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # a sparse file: cheap however large
        f.truncate((1 << 30) + 5)
    for reader in (check_file, open_regular, read_file):
        with pytest.raises(TooLarge) as info:
            reader(str(big), 1 << 30)
        assert str(info.value) == (
            f"{big}: the file holds {(1 << 30) + 5} bytes, above the limit of 1 GiB"
        )
        assert (info.value.size, info.value.limit) == ((1 << 30) + 5, 1 << 30)
    small = tmp_path / "small"
    small.write_bytes(b"12345")
    assert read_file(str(small), 5) == b"12345"
    with pytest.raises(TooLarge):
        read_file(str(small), 4)
    with pytest.raises(FileNotFoundError):
        read_file(str(tmp_path / "nowhere"), 5)


def test_a_name_must_stay_inside_its_folder(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "sub").mkdir()
    (tmp_path / "secret.json").write_text("{}")
    (folder / "ok.json").write_text("{}")
    (folder / "link_in.json").symlink_to("ok.json")
    (folder / "link_out.json").symlink_to(tmp_path / "secret.json")
    (folder / "rel_out.json").symlink_to("../secret.json")
    (folder / "zero.json").symlink_to("/dev/zero")
    f = str(folder)
    assert inside(f, "ok.json") == os.path.join(f, "ok.json")
    assert inside(f, "link_in.json") == os.path.join(f, "link_in.json")
    assert inside(f, "sub/later.json") == os.path.join(f, "sub/later.json")  # may not exist
    cases = {
        "../secret.json": f"leads out of {f} through '..'",
        "sub/../../secret.json": f"leads out of {f} through '..'",
        str(tmp_path / "secret.json"): f"is an absolute path; a file of {f} must be named in it",
        "link_out.json": f"is a symbolic link to {tmp_path / 'secret.json'}, outside the "
        f"folder {f}",
        "rel_out.json": f"is a symbolic link to {tmp_path / 'secret.json'}, outside the folder {f}",
        "zero.json": f"is a symbolic link to /dev/zero, outside the folder {f}",
        "": "is not a file name",
        "a\0b": "is not a file name",
    }
    for name, why in cases.items():
        with pytest.raises(OutsideFolder) as info:
            inside(f, name)
        assert info.value.strerror == why, name
        assert isinstance(info.value, UnsafeFile)
        with pytest.raises(OutsideFolder):
            read_file(name, 1 << 20, folder=f)
    assert read_file("link_in.json", 10, folder=f) == b"{}"


def test_a_hub_cache_snapshot_may_link_into_its_own_blobs(tmp_path):
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "blobs" / "f00d").write_text('{"a": 1}')
    (snapshot / "config.json").symlink_to("../../blobs/f00d")
    (repo / "other").mkdir()
    (repo / "other" / "x").write_text("{}")
    (snapshot / "escape.json").symlink_to("../../other/x")
    assert read_file("config.json", 100, folder=str(snapshot)) == b'{"a": 1}'
    with pytest.raises(OutsideFolder, match="outside the folder"):
        inside(str(snapshot), "escape.json")
    plain = tmp_path / "plain"  # the same links from a folder that is no snapshot
    plain.mkdir()
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "f00d").write_text("{}")
    (plain / "config.json").symlink_to("../blobs/f00d")
    with pytest.raises(OutsideFolder):
        inside(str(plain), "config.json")


def test_bounded_lines_skip_a_long_line_without_holding_it(monkeypatch):
    monkeypatch.setattr(bounded, "_PIECE", 7)  # the skipping reads in several pieces
    data = b"short\n" + b"x" * 100 + b"\n" + b"exactly10\n" + b"y" * 11 + b"\nlast"
    seen = hashlib.sha256()
    lines = list(bounded_lines(io.BytesIO(data), 10, seen.update))
    assert lines == [b"short\n", 101, b"exactly10\n", 12, b"last"]
    assert [isinstance(x, LongLine) for x in lines] == [False, True, False, True, False]
    assert seen.hexdigest() == hashlib.sha256(data).hexdigest()
    tail = list(bounded_lines(io.BytesIO(b"ok\n" + b"z" * 50), 10))
    assert tail == [b"ok\n", 50]
