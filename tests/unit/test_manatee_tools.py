"""The sitter's Postgres tools are bounded in time: one that hangs (a base backup from an
upstream that stopped answering, say) is killed with everything it started, and the sitter
hears why, instead of holding its whole peer in one step."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from systems.manatee import postgres
from systems.manatee.postgres import Postgres

HANGS = """#!/bin/sh
sleep 300 &
echo $! > {pidfile}
wait
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_a_tool_that_hangs_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "child.pid"
    tool = tmp_path / "pg_basebackup"
    tool.write_text(HANGS.format(pidfile=pidfile))
    tool.chmod(0o755)
    monkeypatch.setattr(postgres, "BIN", tmp_path)
    monkeypatch.setattr(postgres, "TOOL_TIMEOUT", 1.0)
    monkeypatch.setattr(postgres.os, "geteuid", lambda: 1000)  # no drop to the postgres user
    peer = Postgres(tmp_path / "pgdata", 5432, "n1")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"pg_basebackup -D x took over 1 s"):
        peer._run("pg_basebackup", "-D", "x")
    assert time.monotonic() - started < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the tool's child outlived it"
