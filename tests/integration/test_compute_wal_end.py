"""Where a compute finds its stopped Postgres's WAL ending, on a real Postgres 15's pg_wal: the
compute bounds pg_waldump by the segment files present, so that it never asks for a missing
segment, and the bound must not cut what it reads.
A WAL whose last record is a segment switch, with no next segment yet (a kill right after the
switch), is the case the bound is for: unbounded, pg_waldump waits 5 s for the next segment on
every election after such a kill, which kept a killed primary from ever serving again while it
was killed every few seconds (tests/e2e/test_churn.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from systems.walkeeper import wire
from systems.walkeeper.compute import Agent, Config
from systems.walkeeper.pgwal import LocalWal, last_record_end, segment_name

PG_BIN = "/usr/lib/postgresql/15/bin"
SEGMENT = 16 << 20

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs Postgres as its user by runuser")


def as_postgres(*cmd: str) -> str:
    done = subprocess.run(
        ["runuser", "-u", "postgres", "--", *cmd], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def pgdata() -> Iterator[Path]:
    """A Postgres that wrote a table, switched segments and was stopped as a kill would leave
    it, with the segment after the switch removed (not yet created when the kill came). In a
    folder of its own, as pytest's are not open to the postgres user."""
    with tempfile.TemporaryDirectory(prefix="harness-wal-end-") as folder:
        tmp_path = Path(folder)
        shutil.chown(tmp_path, "postgres")
        yield from stopped_after_switch(tmp_path)


def stopped_after_switch(tmp_path: Path) -> Iterator[Path]:
    data = tmp_path / "data"
    as_postgres(f"{PG_BIN}/initdb", "-D", str(data), "--no-sync")
    options = f"-p 5499 -k {tmp_path} -c listen_addresses=''"  # a socket in our folder only
    log = str(tmp_path / "postgres.log")  # pg_ctl's output otherwise holds our pipe open
    as_postgres(f"{PG_BIN}/pg_ctl", "-D", str(data), "-o", options, "-l", log, "-w", "start")
    try:
        sql = "CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 1000); "
        switch = as_postgres(
            f"{PG_BIN}/psql", "-h", str(tmp_path), "-p", "5499", "-d", "postgres", "-qAt",
            "-c", sql + "SELECT pg_switch_wal()",
        ).split()[-1]  # fmt: skip
    finally:
        as_postgres(f"{PG_BIN}/pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
    after = wire.parse_lsn(switch) // SEGMENT * SEGMENT + SEGMENT
    (data / "pg_wal" / segment_name(after, SEGMENT)).unlink(missing_ok=True)
    yield data


def test_the_compute_never_asks_for_a_missing_segment_and_reads_to_the_end(pgdata: Path) -> None:
    control = as_postgres(f"{PG_BIN}/pg_controldata", "-D", str(pgdata))
    redo = wire.parse_lsn(control.split("Latest checkpoint's REDO location:")[1].split()[0])
    wal = LocalWal(str(pgdata), SEGMENT)
    assert wal.files_end(redo) == redo // SEGMENT * SEGMENT + SEGMENT  # the switch's segment
    # the agent's pg_waldump is the real one, its complaints kept where the test can read them
    wrapped = pgdata.parent / "bin"
    wrapped.mkdir()
    said = pgdata.parent / "pg_waldump.stderr"
    (wrapped / "pg_waldump").write_text(f'#!/bin/sh\nexec {PG_BIN}/pg_waldump "$@" 2>>{said}\n')
    (wrapped / "pg_waldump").chmod(0o755)
    cfg = Config(
        name="n1", pgdata=str(pgdata), pg_bin=str(wrapped), pg_start="true", slot="walproposer",
        safekeepers={}, computes={}, variant="term-history", failover_after=5.0,
    )  # fmt: skip
    end = Agent(cfg).wal_end(wal, redo)
    assert said.exists(), "the agent did not run pg_waldump"
    assert "could not find file" not in said.read_text(), said.read_text()  # it never waited
    # pg_waldump unbounded: it reads to the switch, waits for the next segment, and gives up
    unbounded = subprocess.run(
        ["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_waldump", "-p", str(pgdata / "pg_wal"),
         "-s", wire.lsn_str(redo)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "could not find file" in unbounded.stderr, unbounded.stderr
    last = unbounded.stdout.splitlines()[-1]
    assert "desc: SWITCH" in last, last
    assert end == last_record_end(last, SEGMENT)
