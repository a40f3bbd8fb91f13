"""`--bug skip-fsync` skips every sync a safekeeper makes of its files (the WAL's fdatasync, the
control file's, the directory's, a truncation's), and without it each write is synced."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from systems.walkeeper import bugs
from systems.walkeeper.storage import Storage


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counted: Counter[str] = Counter()
    real = {"fsync": os.fsync, "fdatasync": os.fdatasync}

    def counting(name: str) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            counted[name] += 1
            real[name](fd)

        return sync

    monkeypatch.setattr(os, "fsync", counting("fsync"))
    monkeypatch.setattr(os, "fdatasync", counting("fdatasync"))
    return counted


def exercise(path: Path) -> None:
    storage = Storage(str(path))
    storage.write(0x1000000, b"x" * 100)  # the first write also saves the control file
    storage.write(0x1000000 + 100, b"y" * 100)
    storage.save()
    storage.truncate(0x1000000 + 50)
    storage.close()


def test_every_write_is_synced(tmp_path: Path, syncs: Counter[str]) -> None:
    exercise(tmp_path)
    assert syncs["fdatasync"] == 2 and syncs["fsync"] >= 5


def test_the_planted_bug_skips_every_sync(
    tmp_path: Path, syncs: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bugs, "ACTIVE", {"skip-fsync"})
    exercise(tmp_path)
    assert syncs == Counter()
