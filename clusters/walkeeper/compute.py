"""The compute agent: each compute node decides for itself, in the cluster, what it is.

- primary: Postgres read-write, with the proxy session (Postgres's synchronous standby and the
  safekeepers' proposer). Before it starts Postgres read-write it asks the safekeepers whose term
  is current: another compute's means this one was replaced, and it rebuilds instead. When its
  term is taken while it runs (a safekeeper answers with a higher term), it stops Postgres at once,
  since a primary that lost its term must not serve, and rebuilds.
- standby: Postgres in hot standby, replaying the committed WAL the safekeepers serve. When a
  quorum of safekeepers has heard from no proposer for `failover_after` seconds, it takes over:
  it wins an election with a higher term (the safekeepers then refuse the old proxy), writes the
  WAL up to the election's VCL into its pg_wal from the safekeepers, restarts Postgres without
  standby.signal (crash recovery replays to the VCL, and the timeline stays 1, the only one the
  safekeepers serve) and runs the proxy session in the term it won.
- rebuild: a base backup from the compute that is primary now, then standby.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import bugs, wire
from .limbo import Limbo
from .proposer import Deposed, NoQuorum, Proposer
from .proxy import STATUS, Session, StatusHandler, StatusServer, is_ours, proposer_id

log = logging.getLogger("compute")

POLL = 1.0
LEASE_SHARE = 0.6  # of failover_after: the old primary stops before a standby may take over
READ_CHUNK = 4 << 20
STUCK_AFTER = 60.0  # seconds a standby may replay without becoming consistent before a rebuild
SEGMENT_IDS = 0x1_0000_0000  # WAL segment names count segments per 4 GiB "log id"


@dataclass
class Config:
    name: str
    pgdata: str
    pg_bin: str
    pg_start: str  # the shell command that starts Postgres (under the node's faked clock)
    slot: str
    safekeepers: dict[str, tuple[str, int]]
    computes: dict[str, tuple[str, int]]  # the other computes' Postgres
    variant: str
    failover_after: float
    mode: str = "safekeeper"
    synchro_timeout: float = 2.0

    @property
    def quorum(self) -> int:
        return len(self.safekeepers) // 2 + 1

    @property
    def local(self) -> str:
        return "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"


class Agent:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.role = "starting"
        self.takeovers = 0
        self.limbo: Limbo | None = None

    # -- Postgres ----------------------------------------------------------------------------

    def _pg(self, args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["runuser", "-u", "postgres", "--", "sh", "-c", f"{self.cfg.pg_bin}/{args}"]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def running(self) -> bool:
        return self._pg(f"pg_ctl -D {self.cfg.pgdata} status", check=False).returncode == 0

    def start_postgres(self) -> None:
        if not self.running():
            subprocess.run(["sh", "-c", self.cfg.pg_start], check=True, timeout=120)

    def stop_postgres(self, mode: str) -> None:
        self._pg(f"pg_ctl -D {self.cfg.pgdata} -m {mode} -w stop", check=False)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        import psycopg  # only computes need it; safekeepers never import this module

        with psycopg.connect(self.cfg.local, autocommit=True) as conn:
            return conn.execute(sql).fetchall()

    @property
    def standby_signal(self) -> str:
        return os.path.join(self.cfg.pgdata, "standby.signal")

    # -- the safekeepers ---------------------------------------------------------------------

    def safekeeper_states(self) -> dict[str, dict[str, Any]]:
        states = {}
        for name, address in self.cfg.safekeepers.items():
            try:
                with wire.connect(address, 2.0) as sock:
                    reply, _ = wire.call(sock, {"type": "status"})
            except OSError:
                continue
            if reply.get("ok"):
                states[name] = reply
        return states

    def current_leader(self, states: dict[str, dict[str, Any]]) -> str:
        """Whose term the safekeepers follow: the proposer voted for in the highest term."""
        top = max(states.values(), key=lambda s: s["term"], default=None)
        return top["voted_for"] if top else ""

    def primary_lost(self, states: dict[str, dict[str, Any]]) -> bool:
        """A quorum of safekeepers answers, and a quorum has heard from no proposer lately."""
        after = self.cfg.failover_after

        def silent(s: dict[str, Any]) -> bool:
            heard = s.get("heard_ago")
            return (heard is None and s.get("up_for", 0) > after) or (heard or 0) > after

        return len(states) >= self.cfg.quorum and sum(map(silent, states.values())) >= (
            self.cfg.quorum
        )

    # -- the roles ---------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            try:
                if os.path.exists(self.standby_signal):
                    self.standby()
                else:
                    self.primary(None)
            except Exception as e:  # every failure is retried: the agent is the node's supervisor
                log.warning("%s: %s: %s", self.role, type(e).__name__, e)
                time.sleep(POLL)

    def standby(self) -> None:
        self.role = "standby"
        self.start_postgres()
        log.info("standby: replaying the safekeepers' committed WAL")
        started = time.monotonic()
        while os.path.exists(self.standby_signal):
            self.start_postgres()
            states = self.safekeeper_states()
            if self.primary_lost(states):
                log.warning(
                    "a quorum of safekeepers has heard from no proposer for %.0f s: taking over",
                    self.cfg.failover_after,
                )
                self.primary(self.take_over())
                return
            if self.consistent():
                started = time.monotonic()
            elif time.monotonic() - started > STUCK_AFTER:
                # its base backup ends in WAL the quorum never got (the primary it copied was
                # deposed): the committed log can never make this copy consistent
                log.warning("not consistent after %.0f s of replay: rebuilding", STUCK_AFTER)
                self.rebuild()
                return
            time.sleep(POLL)

    def consistent(self) -> bool:
        """Whether Postgres answers queries: a standby does once it reached a consistent state."""
        try:
            self.query("SELECT 1")
        except Exception:
            return False
        return True

    def take_over(self) -> Proposer:
        """Win an election, bring Postgres up to its VCL, and start it as the primary."""
        self.role = "taking over"
        system_id = str(self.query("SELECT system_identifier FROM pg_control_system()")[0][0])
        p = Proposer(self.cfg.safekeepers, self.cfg.variant, proposer_id())
        p.elect(system_id=system_id)
        log.info("elected in term %d; VCL %s", p.term, wire.lsn_str(p.vcl))
        self.stop_postgres("fast")
        if p.vcl:
            self.fill_wal(p, self.redo_lsn(), p.vcl)
        os.unlink(self.standby_signal)
        self.takeovers += 1
        return p

    def redo_lsn(self) -> int:
        """Where the stopped standby's crash recovery will begin replaying."""
        out = self._pg(f"pg_controldata -D {self.cfg.pgdata}").stdout
        for line in out.splitlines():
            if line.startswith("Latest checkpoint's REDO location:"):
                return wire.parse_lsn(line.split(":", 1)[1].strip())
        raise RuntimeError("pg_controldata shows no REDO location")

    def fill_wal(self, p: Proposer, start: int, end: int) -> None:
        """Write the log's bytes [start, end) into pg_wal's segment files, as the standby would
        have received them (the bytes it has are the same ones)."""
        start = max(start, p.log_start)
        size = int(self.query_control("Bytes per WAL segment:"))
        user = pwd.getpwnam("postgres")
        pos = start
        while pos < end:
            data = p.read_log(pos, min(end, pos + READ_CHUNK))
            while data:
                segment, offset = divmod(pos, size)
                per_id = SEGMENT_IDS // size
                name = f"{1:08X}{segment // per_id:08X}{segment % per_id:08X}"
                path = os.path.join(self.cfg.pgdata, "pg_wal", name)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    if os.fstat(fd).st_size < size:
                        os.ftruncate(fd, size)
                    chunk = data[: size - offset]
                    os.pwrite(fd, chunk, offset)
                    os.fsync(fd)
                    os.fchown(fd, user.pw_uid, user.pw_gid)
                finally:
                    os.close(fd)
                pos += len(chunk)
                data = data[len(chunk) :]
        log.info("wrote WAL %s..%s into pg_wal", wire.lsn_str(start), wire.lsn_str(end))

    def query_control(self, field: str) -> str:
        out = self._pg(f"pg_controldata -D {self.cfg.pgdata}").stdout
        for line in out.splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
        raise RuntimeError(f"pg_controldata shows no {field!r}")

    def primary(self, elected: Proposer | None) -> None:
        """Serve as the primary until the term is lost; then rebuild as a standby."""
        self.role = "primary"
        if elected is None:
            states = self.safekeeper_states()
            if len(states) < self.cfg.quorum:
                self.stop_postgres("immediate")  # it may not serve without knowing its term
                log.info("only %d safekeepers answer; waiting before serving", len(states))
                time.sleep(POLL)
                return
            leader = self.current_leader(states)
            if leader and not is_ours(leader) and not bugs.on("deposed-primary-serves"):
                log.warning("the safekeepers follow %s now: rebuilding from it", leader)
                self.rebuild()
                return
        limbo = None
        if self.cfg.mode == "confirm-rollback":
            limbo = Limbo(self.cfg.local, self.cfg.pgdata, self.cfg.slot, self.cfg.synchro_timeout)
            limbo.close_gate()
        self.start_postgres()
        self.query(
            "SELECT pg_create_physical_replication_slot(slot_name, true) FROM "
            f"(VALUES ('{self.cfg.slot}')) AS s(slot_name) WHERE NOT EXISTS "
            f"(SELECT 1 FROM pg_replication_slots WHERE slot_name = '{self.cfg.slot}')"
        )
        conninfo = (
            f"host=127.0.0.1 port=5432 user=postgres replication=true "
            f"application_name={self.cfg.slot}"
        )
        if limbo is not None:
            self.limbo = limbo
            threading.Thread(target=limbo.run, daemon=True, name="limbo").start()
        try:
            # With another compute to take over, the primary holds a lease: it stops serving
            # once a quorum has been silent for most of the time a standby waits before acting.
            serves = bugs.on("deposed-primary-serves") or not self.cfg.computes
            lease = None if serves else self.cfg.failover_after * LEASE_SHARE
            session = Session(
                conninfo, self.cfg.slot, self.cfg.safekeepers, self.cfg.variant, elected, lease
            )
            session.run()
        except Deposed as e:
            if bugs.on("deposed-primary-serves"):
                log.warning("deposed (%s); the planted bug keeps Postgres serving", e)
                time.sleep(POLL)
                return
            log.warning("deposed (%s): stopping Postgres and rebuilding", e)
            self.stop_postgres("immediate")
            STATUS.proposer = None
            self.rebuild()
        except NoQuorum as e:
            log.warning("%s: stopping Postgres until the safekeepers answer again", e)
            self.stop_postgres("immediate")
        finally:
            STATUS.proposer = None
            if limbo is not None:
                limbo.stop.set()

    def rebuild(self) -> None:
        """A fresh copy of the current primary's data directory, started as a standby."""
        self.role = "rebuilding"
        self.stop_postgres("immediate")
        target = self.cfg.pgdata + ".rebuild"
        for name, (host, port) in self.cfg.computes.items():
            shutil.rmtree(target, ignore_errors=True)
            # Without WAL (-X none): the standby replays from the safekeepers, which serve only
            # committed WAL. The primary's own WAL may run past the quorum's, and a standby
            # replaying that tail would serve it after a takeover.
            cmd = (
                f"pg_basebackup -h {host} -p {port} -U postgres -D {target} -X none -c fast "
                "--no-password"
            )
            result = self._pg(cmd, check=False)
            if result.returncode != 0:
                log.info("no base backup from %s: %s", name, result.stderr.strip()[-200:])
                continue
            if not os.path.exists(os.path.join(target, "standby.signal")):
                open(os.path.join(target, "standby.signal"), "w").close()
                user = pwd.getpwnam("postgres")
                os.chown(os.path.join(target, "standby.signal"), user.pw_uid, user.pw_gid)
            old = self.cfg.pgdata + ".old"
            shutil.rmtree(old, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.rename(self.cfg.pgdata, old)
            os.rename(target, self.cfg.pgdata)
            shutil.rmtree(old, ignore_errors=True)
            log.info("rebuilt from %s; now a standby", name)
            return
        raise RuntimeError("no other compute gave a base backup")

    def report(self) -> dict[str, Any]:
        state = {"compute": self.cfg.name, "role": self.role, "takeovers": self.takeovers}
        return state | (self.limbo.report() if self.limbo else {})


def serve(cfg: Config, status_port: int) -> None:
    agent = Agent(cfg)
    STATUS.agent = agent.report
    server = StatusServer(("0.0.0.0", status_port), StatusHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log.info(
        "compute agent %s: safekeepers %s, other computes %s, failover after %.0f s",
        cfg.name,
        sorted(cfg.safekeepers),
        sorted(cfg.computes),
        cfg.failover_after,
    )
    agent.run()
