"""Deliverable collection and upload against hostile workspaces, on real files and LocalStorage."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from gdpval.runner.deliverables import Collected, Deliverable, collect, upload
from gdpval.storage.local import LocalStorage

PASSWD = Path("/etc/passwd").read_bytes()
PREFIX = "runs/r/samples/s/attempt-1/deliverable_files"
MB = 1024 * 1024


def reasons(collected: Collected) -> dict[str, str]:
    return {r.path: r.reason for r in collected.refused}


def stored(store: LocalStorage) -> dict[str, bytes]:
    return {key.removeprefix(PREFIX + "/"): store.get_bytes(key) for key in store.list("runs")}


def assert_no_outside_data(store: LocalStorage) -> None:
    for data in stored(store).values():
        assert PASSWD[:64] not in data


@pytest.fixture
def store(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "store")


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A workspace with good files next to every kind of hostile entry."""
    ws = tmp_path / "ws"
    out = ws / "deliverable_files"
    (out / "sub dir" / "a" / "b").mkdir(parents=True)
    (out / "report.docx").write_bytes(b"PK\x03\x04 docx")
    (out / "sub dir" / "naïve ü & (x).txt").write_text("unicode name")
    (out / "sub dir" / "a" / "b" / "deep.csv").write_text("a,b\n1,2\n")
    (out / "empty.txt").write_bytes(b"")
    (out / "passwd").symlink_to("/etc/passwd")
    (out / "up").symlink_to("..")
    (out / "etc").symlink_to("/etc")
    (out / "dangling").symlink_to("/nonexistent/x")
    os.mkfifo(out / "pipe")
    os.mknod(out / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    (out / "big.bin").write_bytes(b"x" * (MB + 1))
    (ws / "secret.txt").write_text("outside")
    os.link(ws / "secret.txt", out / "hardlink.txt")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(out / "sock"))
    sock.close()
    os.mkfifo(ws / "outside-fifo")
    return ws


def test_collect_keeps_plain_files_and_refuses_the_rest(hostile: Path) -> None:
    got = collect(hostile, max_file_bytes=MB, max_files=100)
    assert [f.relpath for f in got.files] == [
        "empty.txt",
        "report.docx",
        "sub dir/a/b/deep.csv",
        "sub dir/naïve ü & (x).txt",
    ]
    assert got.files[1].host_path == hostile / "deliverable_files" / "report.docx"
    assert got.files[1].size == len(b"PK\x03\x04 docx")
    refused = reasons(got)
    hostile_names = ["passwd", "up", "etc", "dangling", "pipe", "null", "big.bin", "hardlink.txt", "sock"]
    assert sorted(refused) == sorted(hostile_names)
    for name in ("passwd", "up", "etc", "dangling"):
        assert refused[name].startswith("symlink")
    assert refused["pipe"] == "not a regular file (fifo)"
    assert refused["null"] == "not a regular file (device)"
    assert refused["sock"] == "not a regular file (socket)"
    assert refused["big.bin"].startswith("over the size cap")
    assert refused["hardlink.txt"].startswith("hard link")
    assert [r.path for r in got.refused] == sorted(r.path for r in got.refused)


def test_upload_copies_only_collected_files(hostile: Path, store: LocalStorage) -> None:
    got = collect(hostile, max_file_bytes=MB, max_files=100)
    assert upload(got, store, PREFIX) == [f.relpath for f in got.files]
    assert stored(store) == {
        "empty.txt": b"",
        "report.docx": b"PK\x03\x04 docx",
        "sub dir/a/b/deep.csv": b"a,b\n1,2\n",
        "sub dir/naïve ü & (x).txt": b"unicode name",
    }
    assert_no_outside_data(store)


def test_count_cap_refuses_the_rest_in_sorted_order(tmp_path: Path) -> None:
    out = tmp_path / "deliverable_files"
    out.mkdir()
    for name in ("e", "d", "c", "b", "a"):
        (out / f"{name}.txt").write_text(name)
    got = collect(tmp_path, max_file_bytes=MB, max_files=3)
    assert [f.relpath for f in got.files] == ["a.txt", "b.txt", "c.txt"]
    assert reasons(got) == {"d.txt": "over the count cap (3 files)", "e.txt": "over the count cap (3 files)"}


def test_count_cap_refusals_are_summarised(tmp_path: Path) -> None:
    out = tmp_path / "deliverable_files"
    out.mkdir()
    for i in range(250):
        (out / f"f{i:03d}").write_bytes(b"")
    got = collect(tmp_path, max_file_bytes=MB, max_files=1)
    assert len(got.files) == 1 and len(got.refused) == 101
    assert got.refused[-1].path == "f101" and "148 more after this one" in got.refused[-1].reason


@pytest.mark.parametrize("target", ["/etc", ".."])
def test_deliverable_files_itself_a_symlink_is_refused(tmp_path: Path, target: str) -> None:
    (tmp_path / "deliverable_files").symlink_to(target)
    got = collect(tmp_path, max_file_bytes=MB, max_files=100)
    assert got.files == []
    assert [(r.path, r.reason) for r in got.refused] == [(".", "deliverable_files itself is not a real directory: symlink (not followed)")]


def test_deliverable_files_a_regular_file_or_missing(tmp_path: Path) -> None:
    empty = Collected(root=tmp_path / "deliverable_files", max_file_bytes=MB)
    assert collect(tmp_path, max_file_bytes=MB, max_files=10) == empty
    (tmp_path / "deliverable_files").write_text("not a folder")
    got = collect(tmp_path, max_file_bytes=MB, max_files=10)
    assert got.files == [] and "regular file" in got.refused[0].reason


def test_undecodable_and_control_character_names_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "deliverable_files"
    out.mkdir()
    with open(os.path.join(os.fsencode(out), b"bad\xff.txt"), "wb") as fh:
        fh.write(b"x")
    (out / "line\nbreak.txt").write_text("x")
    got = collect(tmp_path, max_file_bytes=MB, max_files=10)
    assert got.files == []
    assert reasons(got) == {
        "bad\\xff.txt": "name is not valid UTF-8",
        "line\nbreak.txt": "name contains control characters",
    }
    got.refused[0].model_dump_json()


def test_deep_nesting_is_bounded(tmp_path: Path) -> None:
    deep = tmp_path / "deliverable_files" / "/".join(["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("x")
    got = collect(tmp_path, max_file_bytes=MB, max_files=10)
    assert got.files == [] and "nested deeper" in got.refused[0].reason


def test_swapped_after_collect_is_refused_not_followed(tmp_path: Path, store: LocalStorage) -> None:
    out = tmp_path / "deliverable_files"
    (out / "dir").mkdir(parents=True)
    for name in ("to_link.txt", "to_fifo.txt", "grown.txt", "kept.txt", "dir/passwd"):
        (out / name).write_text("ok")
    got = collect(tmp_path, max_file_bytes=10, max_files=10)
    assert len(got.files) == 5
    (out / "to_link.txt").unlink()
    (out / "to_link.txt").symlink_to("/etc/passwd")
    (out / "to_fifo.txt").unlink()
    os.mkfifo(out / "to_fifo.txt")
    writer = threading.Timer(5.0, lambda: _unblock_fifo(out / "to_fifo.txt"))
    writer.start()
    (out / "grown.txt").write_text("x" * 11)
    (out / "dir").rename(out / "moved")
    (out / "dir").symlink_to("/etc")
    try:
        assert upload(got, store, PREFIX) == ["kept.txt"]
    finally:
        writer.cancel()
    refused = reasons(got)
    assert set(refused) == {"to_link.txt", "to_fifo.txt", "grown.txt", "dir/passwd"}
    assert "no longer a plain file" in refused["to_link.txt"]
    assert refused["to_fifo.txt"] == "not a regular file (fifo)"
    assert "size cap" in refused["grown.txt"]
    assert "no longer a plain file" in refused["dir/passwd"]
    assert stored(store) == {"kept.txt": b"ok"}
    assert_no_outside_data(store)


def _unblock_fifo(path: Path) -> None:
    """Only runs if upload wrongly blocked on the fifo: lets the test fail instead of hang."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)


@pytest.mark.parametrize("relpath", ["../secret.txt", "/etc/passwd", "a/../../secret.txt", "", "a//b", "x\x00y"])
def test_forged_paths_are_never_read(tmp_path: Path, store: LocalStorage, relpath: str) -> None:
    (tmp_path / "deliverable_files").mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    forged = Collected(
        root=tmp_path / "deliverable_files",
        max_file_bytes=MB,
        files=[Deliverable(relpath, tmp_path / "secret.txt", 7)],
    )
    assert upload(forged, store, PREFIX) == []
    assert forged.refused[0].path == relpath and "name" in forged.refused[0].reason
    assert stored(store) == {}


def test_large_files_stream_through_a_temp_copy(tmp_path: Path, store: LocalStorage) -> None:
    out = tmp_path / "deliverable_files"
    out.mkdir()
    data = os.urandom(9 * MB)
    (out / "video.mp4").write_bytes(data)
    got = collect(tmp_path, max_file_bytes=10 * MB, max_files=10)
    assert upload(got, store, "p/") == ["video.mp4"]
    assert store.get_bytes("p/video.mp4") == data


def test_total_cap_counts_apparent_size_of_sparse_files(tmp_path: Path, store: LocalStorage) -> None:
    folder = tmp_path / "deliverable_files"
    folder.mkdir()
    for index in range(6):
        with open(folder / f"sparse-{index}.bin", "wb") as fh:
            fh.truncate(3 * MB)  # no block on disk, 3 MiB once copied
    got = collect(tmp_path, max_file_bytes=4 * MB, max_files=100, max_total_bytes=10 * MB)
    assert [f.relpath for f in got.files] == ["sparse-0.bin", "sparse-1.bin", "sparse-2.bin"]
    assert {r.path for r in got.refused} == {f"sparse-{i}.bin" for i in range(3, 6)}
    assert all("total size cap" in r.reason for r in got.refused)
    assert upload(got, store, "d") == ["sparse-0.bin", "sparse-1.bin", "sparse-2.bin"]


def test_total_cap_holds_when_a_file_grows_after_collection(tmp_path: Path, store: LocalStorage) -> None:
    folder = tmp_path / "deliverable_files"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"x" * MB)
    (folder / "b.bin").write_bytes(b"y" * MB)
    got = collect(tmp_path, max_file_bytes=4 * MB, max_files=100, max_total_bytes=3 * MB)
    (folder / "a.bin").write_bytes(b"x" * 3 * MB)
    assert upload(got, store, "d") == ["a.bin"]
    assert sum(len(v) for v in stored(store).values()) <= 3 * MB
    assert "b.bin" in reasons(got)
