"""Three Manatee sitters, each with its own Postgres 15 peer, on a real ZooKeeper, all on loopback:
the first generation is declared and the primary opens for writes once its sync caught up; when
the primary's sitter and Postgres die, the sync declares the next generation, the async becomes
its sync, and no acknowledged write is lost."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from systems.manatee.postgres import BIN, Postgres
from systems.manatee.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT = 4.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peers:
    """The sitters (subprocesses) and their Postgres peers, all stopped at the end."""

    def __init__(self, zookeeper: str, folder: Path) -> None:
        self.zookeeper, self.folder = zookeeper, folder
        self.sitters: dict[str, subprocess.Popen[bytes]] = {}
        self.postgres: dict[str, Postgres] = {}

    def start(self, name: str, zookeeper: str | None = None, *options: str) -> None:
        port = free_port()
        self.postgres[name] = Postgres(self.folder / name, port, name)
        log = (self.folder / f"{name}.sitter.log").open("ab")
        self.sitters[name] = subprocess.Popen(
            [sys.executable, "-m", "systems.manatee.sitter",
             "--zookeeper", zookeeper or self.zookeeper,
             "--cluster", "t", "--name", name, "--datadir", str(self.folder / name),
             "--port", str(port), "--session-timeout", str(SESSION_TIMEOUT), *options],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def crash(self, name: str) -> None:
        """The machine dies: its sitter and its Postgres at once."""
        self.sitters[name].send_signal(signal.SIGKILL)
        self.sitters[name].wait()
        pg = self.postgres[name]
        if pg.running():
            pg._run("pg_ctl", "stop", "-m", "immediate", "-D", str(pg.datadir))

    def close(self) -> None:
        for sitter in self.sitters.values():
            sitter.kill()
            sitter.wait()
        for pg in self.postgres.values():
            if (pg.datadir / "PG_VERSION").exists():
                pg._run("pg_ctl", "stop", "-m", "immediate", "-D", str(pg.datadir), check=False)
        # what a killed sitter left running (an initdb, a pg_basebackup): ours, by their folder
        subprocess.run(["pkill", "-KILL", "-f", str(self.folder)], check=False)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(self.folder.glob("*.sitter.log")))  # fmt: skip


class Link:
    """A TCP relay on loopback between one sitter and ZooKeeper, which the test can cut: the
    sitter alone loses ZooKeeper while its Postgres and everything else stay connected."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.open = True
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.open = False
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.sockets = []

    def mend(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self.server.close()


@pytest.fixture
def peers(zookeeper: str) -> Iterator[Peers]:
    if not (BIN / "postgres").exists():
        pytest.fail(f"{BIN} has no Postgres 15: `make bench` installs Debian's postgresql-15")
    folder = Path(tempfile.mkdtemp(prefix="manatee-", dir="/tmp"))
    folder.chmod(0o777)  # Postgres runs as its own user, and needs to reach its data directory
    made = Peers(zookeeper, folder)
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(folder, ignore_errors=True)


def cluster_state(zookeeper: str) -> ClusterState | None:
    zk = KazooClient(hosts=zookeeper)
    zk.start()
    try:
        if not zk.exists("/manatee/t/state"):
            return None
        return ClusterState.from_json(zk.get("/manatee/t/state")[0])
    finally:
        zk.stop()
        zk.close()


def present(zookeeper: str) -> list[str]:
    zk = KazooClient(hosts=zookeeper)
    zk.start()
    try:
        if not zk.exists("/manatee/t/election"):
            return []
        return [c.rsplit("-", 1)[0] for c in zk.get_children("/manatee/t/election")]
    finally:
        zk.stop()
        zk.close()


def until(what: str, check: Callable[[], Any], peers: Peers, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if found := check():
                return found
        except RuntimeError:
            pass  # Postgres not up yet
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {timeout} s\n{peers.logs()}")


def writable(pg: Postgres) -> bool:
    return pg.running() and pg.sql("SHOW default_transaction_read_only") == "off"


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the sitters run Postgres as its own user via runuser"
)
def test_first_generation_then_the_sync_replaces_a_crashed_primary(
    zookeeper: str, peers: Peers
) -> None:
    for name in ("n1", "n2", "n3"):
        peers.start(name)
    first = until("the first generation", lambda: cluster_state(zookeeper), peers)
    assert first.g == 1 and sorted([first.p, first.s, *first.a]) == ["n1", "n2", "n3"]
    (third,) = first.a
    primary = peers.postgres[first.p]
    until("the primary opening for writes", lambda: writable(primary), peers)
    primary.sql("CREATE TABLE acked (v int); INSERT INTO acked VALUES (1), (2), (3)")
    until("the async replicating", lambda: peers.postgres[third].sql(
        "SELECT count(*) FROM acked") == "3", peers)  # fmt: skip

    peers.crash(first.p)
    crashed = time.monotonic()
    second = until("the sync declaring generation 2",
                   lambda: (s := cluster_state(zookeeper)) and s.g == 2 and s, peers)  # fmt: skip
    declared = time.monotonic() - crashed
    assert (second.p, second.s, second.a) == (first.s, third, ())
    assert second.init_wal >= first.init_wal
    new = peers.postgres[first.s]
    until("the new primary opening for writes", lambda: writable(new), peers)
    opened = time.monotonic() - crashed
    assert new.sql("SELECT count(*) FROM acked") == "3"  # no acknowledged write lost
    new.sql("INSERT INTO acked VALUES (4)")  # and it takes writes, acknowledged by n3
    print(f"generation 2 declared {declared:.1f} s after the crash, read-write at {opened:.1f} s")
    assert declared < SESSION_TIMEOUT + 10


@pytest.mark.skipif(os.geteuid() != 0, reason="the sitters run Postgres as its user by runuser")
def test_a_primary_whose_session_expires_is_replaced_and_acknowledges_nothing_after(
    zookeeper: str, peers: Peers
) -> None:
    """As the seed is written: the old primary's Postgres keeps running when its sitter loses
    ZooKeeper (here the sitter is frozen, so its session expires), but its sync has moved on to
    the next generation, so a write there waits for a quorum it never gets: not acknowledged.
    Back, the old primary sees the new generation, stops Postgres, and is rebuilt as an async."""
    for name in ("n1", "n2", "n3"):
        peers.start(name)
    first = until("the first generation", lambda: cluster_state(zookeeper), peers)
    old = peers.postgres[first.p]
    until("the primary opening for writes", lambda: writable(old), peers)
    old.sql("CREATE TABLE acked (v int); INSERT INTO acked VALUES (1)")

    peers.sitters[first.p].send_signal(signal.SIGSTOP)  # cut off from ZooKeeper, Postgres up
    second = until("the sync declaring generation 2",
                   lambda: (s := cluster_state(zookeeper)) and s.g == 2 and s, peers)  # fmt: skip
    assert second.p == first.s
    until("the new primary opening for writes", lambda: writable(peers.postgres[second.p]), peers)
    assert old.running()  # as written: nothing stops it
    insert = [str(BIN / "psql"), "-h", old.host, "-p", str(old.port), "-U", "postgres",
              "-d", "postgres", "-c", "INSERT INTO acked VALUES (2)"]  # fmt: skip
    # the commit waits for a sync that moved on; or, on a loaded machine, the connection fails
    # first: either way nothing is acknowledged (a clean exit would be an acknowledgement)
    try:
        done = subprocess.run(insert, capture_output=True, text=True, timeout=5)
    except subprocess.TimeoutExpired:
        pass
    else:
        assert done.returncode != 0, f"the old primary acknowledged a write: {done.stdout}"

    peers.sitters[first.p].send_signal(signal.SIGCONT)

    def rejoined() -> bool:
        state = cluster_state(zookeeper)
        return state is not None and first.p in state.a

    until("the old primary rejoining as an async", rejoined, peers)
    until("the old primary following the new one", lambda: old.running() and old.sql(
        "SELECT pg_is_in_recovery()") == "t", peers)  # fmt: skip
    new = peers.postgres[second.p]
    assert new.sql("SELECT array_agg(v ORDER BY v) FROM acked") == "{1}"


@pytest.mark.skipif(os.geteuid() != 0, reason="the sitters run Postgres as its user by runuser")
@pytest.mark.parametrize("option", [False, True], ids=["as-written", "stop-on-session-loss"])
def test_a_primary_cut_off_from_zookeeper_alone_is_replaced(
    zookeeper: str, peers: Peers, request: pytest.FixtureRequest, option: bool
) -> None:
    """The primary's sitter alone loses ZooKeeper (its link cut; Postgres and the peers still
    connected): the sync declares the next generation. As written, the old Postgres keeps
    running and still answers reads, but acknowledges no write (its sync moved on); with
    --stop-on-session-loss it stops once the session must have expired."""
    link = Link(zookeeper)
    request.addfinalizer(link.close)
    peers.start("n1", link.address, *(["--stop-on-session-loss"] if option else []))
    until("n1 joining first", lambda: present(zookeeper) == ["n1"], peers)
    for name in ("n2", "n3"):
        peers.start(name)
    first = until("the first generation", lambda: cluster_state(zookeeper), peers)
    assert first.p == "n1"
    old = peers.postgres["n1"]
    until("the primary opening for writes", lambda: writable(old), peers)
    old.sql("CREATE TABLE acked (v int); INSERT INTO acked VALUES (1)")

    link.cut()
    cut = time.monotonic()
    second = until("generation 2",
                   lambda: (s := cluster_state(zookeeper)) and s.g == 2 and s, peers)  # fmt: skip
    assert second.p == first.s
    if option:
        until("the primary's Postgres stopping", lambda: not old.running(), peers)
        stopped = time.monotonic() - cut
        assert stopped >= SESSION_TIMEOUT - 0.5  # not before the session could have expired
        print(f"the cut-off primary stopped Postgres {stopped:.1f} s after the cut")
    else:
        assert old.running() and old.sql("SELECT count(*) FROM acked") == "1"  # still serves
        insert = [str(BIN / "psql"), "-h", old.host, "-p", str(old.port), "-U", "postgres",
                  "-d", "postgres", "-c", "INSERT INTO acked VALUES (2)"]  # fmt: skip
        with pytest.raises(subprocess.TimeoutExpired):  # waits for a sync that moved on
            subprocess.run(insert, capture_output=True, timeout=5)
        assert old.running()  # as written: nothing stops it while the link is cut
    link.mend()
    until("the old primary following the new one", lambda: old.running() and old.sql(
        "SELECT pg_is_in_recovery()") == "t", peers)  # fmt: skip
    new = peers.postgres[second.p]
    assert new.sql("SELECT array_agg(v ORDER BY v) FROM acked") == "{1}"
