"""The sitter's hands on real Postgres 15 peers on loopback, where a standby cannot simply go on:
one that cannot start from what it holds is rebuilt from its upstream (seen in a manatee run: a
sync restarted after its upstream's promotion refused the new timeline, and its primary stayed
read-only to the end), and a rebuild whose upstream is out of reach leaves the data it held."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from systems.manatee.postgres import BIN, Postgres
from tests.integration.test_manatee_sitters import free_port

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sitter runs Postgres as its own user via runuser"
)


@pytest.fixture
def folder() -> Iterator[Path]:
    if not (BIN / "postgres").exists():
        pytest.fail(f"{BIN} has no Postgres 15: `make test-debs` installs Debian's postgresql-15")
    made = Path(tempfile.mkdtemp(prefix="manatee-", dir="/tmp"))
    made.chmod(0o777)  # Postgres runs as its own user, and needs to reach its data directory
    try:
        yield made
    finally:
        for datadir in made.glob("*/PG_VERSION"):
            subprocess.run(["runuser", "-u", "postgres", "--", str(BIN / "pg_ctl"), "stop",
                            "-m", "immediate", "-D", str(datadir.parent)],
                           capture_output=True, check=False)  # fmt: skip
        subprocess.run(["pkill", "-KILL", "-f", str(made)], check=False)
        shutil.rmtree(made, ignore_errors=True)


def pair(folder: Path) -> tuple[Postgres, Postgres, str]:
    """A primary with one row and a standby of it that has replayed that row."""
    primary = Postgres(folder / "a", free_port(), "a")
    standby = Postgres(folder / "b", free_port(), "b")
    primary.make_primary("b")
    upstream = f"127.0.0.1:{primary.port}"
    standby.make_standby(upstream)
    deadline = time.monotonic() + 60
    while not (standby.streaming() and primary.open_for_writes("b")):
        assert time.monotonic() < deadline, "the standby never caught up"
        time.sleep(0.5)
    primary.sql("CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
    return primary, standby, upstream


def test_a_standby_that_cannot_start_from_what_it_holds_is_rebuilt(folder: Path) -> None:
    _, standby, upstream = pair(folder)
    standby.stop()
    for segment in (standby.datadir / "pg_wal").glob("0*"):
        segment.unlink()  # no checkpoint record to start from: Postgres refuses to start
    standby.make_standby(upstream)
    assert standby.running() and standby.sql("SELECT count(*) FROM t") == "1"


def test_a_rebuild_from_an_upstream_out_of_reach_keeps_the_data_held(folder: Path) -> None:
    _, standby, _ = pair(folder)
    with pytest.raises(RuntimeError, match="pg_basebackup"):
        standby.make_standby(f"127.0.0.1:{free_port()}", rebuild=True)
    assert (standby.datadir / "PG_VERSION").exists()
    standby.make_standby(standby.role().split()[1])  # its own upstream again: it starts
    assert standby.sql("SELECT count(*) FROM t") == "1"
