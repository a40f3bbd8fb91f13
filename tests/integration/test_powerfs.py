"""The power layer on its own, a real FUSE mount on this machine: what a power loss keeps is
exactly what was made durable. Written data survives only an fsync (or fdatasync) of its file, a
truncation too; a create, a rename or a removal survives only once an fsync followed it (of any
file or directory: ext4's and XFS's one journal); a rename over a file takes its data with it
(ext4's auto_da_alloc). Files keep the owner who made them, and the
layer leaves nothing mounted behind."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters import power

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse"
)


@pytest.fixture
def mnt() -> Iterator[Path]:
    cluster = f"t{secrets.token_hex(4)}"
    layer = power.mount(cluster, "n1")
    try:
        yield layer.mount_point
    finally:
        power.unmount_cluster(cluster)
        assert not power.mounted(layer.mount_point)
        assert not layer.root.exists()


def lose(mnt: Path) -> str:
    return power.command(mnt.parent / "control.sock", "lose")


def sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: Path, data: bytes, fsync: bool, mode: int = os.O_WRONLY | os.O_CREAT) -> None:
    fd = os.open(path, mode, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_data_survives_only_an_fsync_of_its_file(mnt: Path) -> None:
    write(mnt / "a", b"", fsync=True)
    write(mnt / "b", b"", fsync=True)
    sync(mnt)  # both names are durable
    write(mnt / "a", b"synced", fsync=True)
    write(mnt / "a", b"SYNCED and then more", fsync=False, mode=os.O_WRONLY)
    write(mnt / "b", b"never synced", fsync=False, mode=os.O_WRONLY)
    assert (mnt / "a").read_bytes() == b"SYNCED and then more"
    assert "lost 8192 bytes of 2 files" in lose(mnt)
    assert (mnt / "a").read_bytes() == b"synced"
    assert (mnt / "b").read_bytes() == b""


def test_fdatasync_makes_data_durable_too(mnt: Path) -> None:
    write(mnt / "wal", b"", fsync=True)
    sync(mnt)
    fd = os.open(mnt / "wal", os.O_WRONLY)
    os.pwrite(fd, b"x" * 10000, 5000)  # across pages
    os.fdatasync(fd)
    os.close(fd)
    lose(mnt)
    assert (mnt / "wal").read_bytes() == bytes(5000) + b"x" * 10000


def test_a_create_no_fsync_followed_is_undone(mnt: Path) -> None:
    """Names are durable once an fsync, of any file or directory, commits the journal (ext4's
    and XFS's one journal); a create no fsync followed is undone, with what it held."""
    (mnt / "dir").mkdir()
    write(mnt / "dir" / "kept", b"data", fsync=True)  # commits the mkdir and the create
    write(mnt / "dir" / "undone", b"data", fsync=False)
    (mnt / "dir" / "sub").mkdir()
    write(mnt / "dir" / "sub" / "deep", b"data", fsync=False)
    lose(mnt)
    assert sorted(p.name for p in (mnt / "dir").iterdir()) == ["kept"]
    assert (mnt / "dir" / "kept").read_bytes() == b"data"


def test_a_directory_fsync_commits_the_names_before_it(mnt: Path) -> None:
    write(mnt / "created", b"", fsync=False)
    (mnt / "made").mkdir()
    sync(mnt)
    lose(mnt)
    assert sorted(p.name for p in mnt.iterdir()) == ["created", "made"]


def test_a_rename_no_fsync_followed_is_undone(mnt: Path) -> None:
    write(mnt / "control.json", b"old", fsync=True)
    sync(mnt)
    write(mnt / "control.json.tmp", b"new", fsync=True)
    os.replace(mnt / "control.json.tmp", mnt / "control.json")
    assert (mnt / "control.json").read_bytes() == b"new"
    lose(mnt)
    # the replaced file is back, and the new one (its create was fsynced) under its old name
    assert sorted(p.name for p in mnt.iterdir()) == ["control.json", "control.json.tmp"]
    assert (mnt / "control.json").read_bytes() == b"old"
    assert (mnt / "control.json.tmp").read_bytes() == b"new"


def test_a_rename_with_its_directory_fsynced_survives(mnt: Path) -> None:
    write(mnt / "control.json", b"old", fsync=True)
    sync(mnt)
    write(mnt / "control.json.tmp", b"new", fsync=True)
    os.replace(mnt / "control.json.tmp", mnt / "control.json")
    sync(mnt)
    lose(mnt)
    assert sorted(p.name for p in mnt.iterdir()) == ["control.json"]
    assert (mnt / "control.json").read_bytes() == b"new"


def test_a_file_that_replaces_another_by_rename_has_its_data_on_disk(mnt: Path) -> None:
    """ext4's auto_da_alloc: replace-via-rename without an fsync leaves the old file or the new
    one after a loss, never an empty one; a rename to a new name forces nothing."""
    write(mnt / "control.json", b"old", fsync=True)
    sync(mnt)
    write(mnt / "control.json.tmp", b"new", fsync=False)
    os.replace(mnt / "control.json.tmp", mnt / "control.json")
    write(mnt / "fresh.tmp", b"data", fsync=False)
    os.replace(mnt / "fresh.tmp", mnt / "fresh")
    write(mnt / "other", b"", fsync=True)  # commits the journal: both renames are durable
    lose(mnt)
    assert (mnt / "control.json").read_bytes() == b"new"
    assert (mnt / "fresh").read_bytes() == b""


def test_a_removal_no_fsync_followed_is_undone(mnt: Path) -> None:
    write(mnt / "segment", b"held", fsync=True)
    sync(mnt)
    (mnt / "segment").unlink()
    assert not (mnt / "segment").exists()
    lose(mnt)
    assert (mnt / "segment").read_bytes() == b"held"


def test_a_truncation_survives_only_an_fsync_of_its_file(mnt: Path) -> None:
    write(mnt / "log", b"0123456789", fsync=True)
    sync(mnt)
    os.truncate(mnt / "log", 4)
    write(mnt / "log", b"!", fsync=False, mode=os.O_WRONLY | os.O_APPEND)
    assert (mnt / "log").read_bytes() == b"0123!"
    lose(mnt)
    assert (mnt / "log").read_bytes() == b"0123456789"
    with open(mnt / "log", "r+b") as f:
        f.truncate(4)
        f.seek(8)
        f.write(b"!")  # past the cut: the gap reads as zeros, not the old bytes
        f.flush()
        os.fsync(f.fileno())
    lose(mnt)
    assert (mnt / "log").read_bytes() == b"0123" + bytes(4) + b"!"


def test_files_belong_to_who_made_them(mnt: Path) -> None:
    os.chmod(mnt, 0o777)
    subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", f"echo x > {mnt}/theirs"],
                   check=True)  # fmt: skip
    assert (mnt / "theirs").stat().st_uid == int(
        subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True).stdout
    )
    assert (mnt.parent / "data" / "theirs").stat().st_uid == (mnt / "theirs").stat().st_uid


def test_stats_count_what_a_loss_would_drop(mnt: Path) -> None:
    write(mnt / "f", b"y" * 5000, fsync=False)
    assert power.command(mnt.parent / "control.sock", "stats") == (
        "unsynced 8192 bytes of 1 files, 1 name changes"
    )


def test_what_an_os_would_have_written_by_itself_survives(tmp_path: Path) -> None:
    """Data unsynced for the writeback delay is written back, names older than the commit
    interval are durable, and `sync` makes everything durable at once."""
    cluster = f"t{secrets.token_hex(4)}"
    layer = power.layer(cluster, "n1")
    for path in (layer.data, layer.mount_point):
        path.mkdir(parents=True)
    binary = power.ensure_binary()
    args = [str(layer.data), str(layer.mount_point), str(layer.control)]
    daemon = subprocess.Popen([str(binary), *args, "--writeback", "1", "--commit", "1"])
    try:
        while not (power.mounted(layer.mount_point) and layer.control.exists()):
            time.sleep(0.05)
        mnt = layer.mount_point
        write(mnt / "old", b"written back", fsync=False)
        time.sleep(2.5)  # a sweep runs every second
        write(mnt / "young", b"not yet", fsync=False)
        lose(mnt)
        assert sorted(p.name for p in mnt.iterdir()) == ["old"]
        assert (mnt / "old").read_bytes() == b"written back"
        write(mnt / "synced", b"at once", fsync=False)
        assert power.command(layer.control, "sync").startswith("synced 4096 bytes")
        lose(mnt)
        assert (mnt / "synced").read_bytes() == b"at once"
    finally:
        power.unmount_cluster(cluster)
        daemon.wait(10)
