"""The compute agent: each compute node decides for itself, in the cluster, what it is.

What it enforces, whatever the faults:

- **Serving.** Its Postgres takes clients only while this compute leads a term and the quorum
  holds everything that Postgres had written when its stream began (so its WAL is the committed
  log up to the term's start, and nothing it shows can be lost with it). Until then, and as a
  standby, pg_hba.conf admits only local connections and replication; when the term ends
  (deposed, no quorum for the lease, the stream lost, a stall) Postgres is stopped at once.
- **Catching up.** Whoever wins a term with a VCL its Postgres does not hold writes the log up to
  VCL into its pg_wal (crash recovery then replays it) before streaming; if its Postgres holds
  WAL the log does not (a tail the quorum never took), it stands down and never stands for
  election again until it has been rebuilt from a compute whose Postgres is on the log.
- **Standing for election** only when the safekeepers follow nobody, or this compute's own
  earlier session, or a quorum has heard from no proposer for `failover_after` seconds (and
  is still silent when each one votes); a compute that sees another one serve rebuilds from it.
- **Stalls.** A Postgres whose backends pile up waiting for the quorum is stopped at once, never
  cancelled: a cancelled wait would make its transaction visible without the quorum, while after
  a stop its commit stays invisible until a quorum holds it.
- **Cancels.** For the same reason no client may cancel that wait: Postgres listens on the
  loopback, and clients reach it through the agent's front (front.py), which drops their cancel
  requests.

Roles: `candidate` (Postgres stopped, waiting to stand), `taking over` (elected, bringing
Postgres to the log), `primary` (streaming; `serving` once the gate opens), `standby` (replaying
the committed WAL the safekeepers serve), `rebuilding`, and `divergent` (waiting for a source to
rebuild from).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import random
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import bugs, pgwal, wire
from .front import Front
from .limbo import Limbo
from .pgstream import StreamError
from .proposer import Deposed, NoQuorum, Proposer, silent
from .proxy import STATUS, LogMismatch, Session, StatusHandler, StatusServer, is_ours, proposer_id

log = logging.getLogger("compute")

POLL = 1.0
LEASE_SHARE = 0.6  # of failover_after: the old primary stops before a standby may take over
STUCK_AFTER = 60.0  # seconds a standby may replay without becoming consistent before a rebuild
CHECK_SPAN = 16 << 20  # bytes of WAL before min(Postgres's end, VCL) compared with the log
STALL_LIMIT = 64  # backends waiting for the quorum at once before Postgres is stopped
FAILED_SESSIONS = 3  # terms won at one VCL whose stream failed before serving: stand down
WATCH_INTERVAL = 1.0
HBA = """# Written by the compute agent: remote clients only while this compute serves as primary.
local   all          all                 trust
host    all          all   127.0.0.2/32  {remote}
host    all          all   127.0.0.1/32  trust
host    all          all   ::1/128       trust
host    replication  all   0.0.0.0/0     trust
host    all          all   0.0.0.0/0     {remote}
"""


class Divergent(Exception):
    """This compute's Postgres cannot continue the log: it must be rebuilt."""


class Stalled(Exception):
    pass


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
    status_port: int = 7677  # every compute's agent answers on the same port
    client_port: int = 5432  # the front, where clients and other computes connect
    pg_port: int = 5434  # Postgres itself, on the loopback: the agent's own connections

    @property
    def quorum(self) -> int:
        return len(self.safekeepers) // 2 + 1

    @property
    def local(self) -> str:
        return f"host=127.0.0.1 port={self.pg_port} user=postgres dbname=postgres connect_timeout=3"


class Agent:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.role = "starting"
        self.takeovers = 0
        self.elections = 0
        self.serving = False
        self.consistent_now = False
        self.limbo: Limbo | None = None
        self.last_note = ""
        self.failed_at = (0, 0)  # a VCL, and how many sessions at it failed before serving
        self.lease: tuple[Proposer, float] | None = None  # the leading term's proposer and lease

    def note(self, message: str, *args: Any) -> None:
        """Log a waiting state once, not at every poll."""
        text = message % args
        if text != self.last_note:
            log.info("%s", text)
            self.last_note = text

    # -- Postgres ----------------------------------------------------------------------------

    def _pg(self, args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["runuser", "-u", "postgres", "--", "sh", "-c", f"{self.cfg.pg_bin}/{args}"]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def running(self) -> bool:
        return self._pg(f"pg_ctl -D {self.cfg.pgdata} status", check=False).returncode == 0

    def start_postgres(self) -> None:
        """Start Postgres, its gate closed: it admits no remote client until `open_gate`."""
        if not self.running():
            self.write_hba(open_=False)
            subprocess.run(["sh", "-c", self.cfg.pg_start], check=True, timeout=120)

    def stop_postgres(self, mode: str) -> None:
        self.serving = False
        self._pg(f"pg_ctl -D {self.cfg.pgdata} -m {mode} -w stop", check=False)
        self.write_hba(open_=False)

    def write_hba(self, open_: bool) -> None:
        path = os.path.join(self.cfg.pgdata, "pg_hba.conf")
        if not os.path.isdir(self.cfg.pgdata):
            return
        with open(path + ".tmp", "w") as f:
            f.write(HBA.format(remote="trust" if open_ else "reject"))
        user = pwd.getpwnam("postgres")
        os.chown(path + ".tmp", user.pw_uid, user.pw_gid)
        os.replace(path + ".tmp", path)

    def open_gate(self, lsn: int) -> None:
        """The quorum holds Postgres's WAL up to where it stood when the stream began: serve."""
        self.write_hba(open_=True)
        self._pg(f"pg_ctl -D {self.cfg.pgdata} reload")
        self.serving = True
        self.failed_at = (0, 0)
        log.info("the quorum holds Postgres's WAL to %s: serving clients", wire.lsn_str(lsn))

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        import psycopg  # only computes need it; safekeepers never import this module

        with psycopg.connect(self.cfg.local, autocommit=True) as conn:
            return conn.execute(sql).fetchall()

    def control(self) -> dict[str, str]:
        """pg_controldata's fields (Postgres may be stopped)."""
        out = self._pg(f"pg_controldata -D {self.cfg.pgdata}").stdout
        return {
            key.strip(): value.strip()
            for key, _, value in (line.partition(":") for line in out.splitlines())
        }

    @property
    def standby_signal(self) -> str:
        return os.path.join(self.cfg.pgdata, "standby.signal")

    @property
    def divergent_marker(self) -> str:
        """Outside the data directory, so that only a rebuild (a new directory) clears it."""
        return self.cfg.pgdata + ".divergent"

    # -- the safekeepers and the other computes ----------------------------------------------

    def safekeeper_states(self) -> dict[str, dict[str, Any]]:
        return statuses(self.cfg.safekeepers)

    def current_leader(self, states: dict[str, dict[str, Any]]) -> str:
        """Whose term the safekeepers follow: the proposer voted for in the highest term."""
        top = max(states.values(), key=lambda s: s["term"], default=None)
        return top["voted_for"] if top else ""

    def primary_lost(self, states: dict[str, dict[str, Any]]) -> bool:
        """A quorum of safekeepers answers, and a quorum has heard from no proposer lately."""
        quiet = sum(silent(s, self.cfg.failover_after) for s in states.values())
        return len(states) >= self.cfg.quorum and quiet >= self.cfg.quorum

    def computes_states(self) -> dict[str, dict[str, Any]]:
        """What the other computes' agents say of themselves; the silent ones are left out."""
        port = self.cfg.status_port
        return statuses({name: (host, port) for name, (host, _) in self.cfg.computes.items()})

    def sources(self) -> list[str]:
        """Computes whose Postgres is on the log, to copy: the serving primary first, then the
        consistent standbys. A divergent compute, or one not yet caught up, is never copied."""
        states = self.computes_states()
        serving = [n for n, s in states.items() if s.get("role") == "primary" and s.get("serving")]
        standbys = [
            n for n, s in states.items() if s.get("role") == "standby" and s.get("consistent")
        ]
        return serving + standbys

    # -- the roles ---------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            try:
                if os.path.exists(self.divergent_marker):
                    self.role = "divergent"
                    self.rebuild()
                elif os.path.exists(self.standby_signal):
                    self.standby()
                else:
                    self.candidate()
            except Exception as e:  # every failure is retried: the agent is the node's supervisor
                self.note("%s: %s: %s", self.role, type(e).__name__, e)
                pause()

    def candidate(self) -> None:
        """Without a term, Postgres stays stopped; stand for election when it is this
        compute's turn, or rebuild from the compute that serves."""
        self.role = "candidate"
        serving_bug = bugs.on("deposed-primary-serves") and self.serving
        if not serving_bug:
            self.stop_postgres("immediate")
        states = self.safekeeper_states()
        if len(states) < self.cfg.quorum:
            self.note("only %d safekeepers answer; waiting before standing", len(states))
            pause()
            return
        leader = self.current_leader(states)
        if leader and not is_ours(leader) and not bugs.on("deposed-primary-serves"):
            others = self.computes_states()
            serving = [
                n for n, s in others.items() if s.get("proposer") == leader and s.get("serving")
            ]
            if serving:
                log.warning("the safekeepers follow %s, which serves: rebuilding from it", leader)
                self.rebuild(serving)
                return
            if not self.primary_lost(states):
                self.note(
                    "the safekeepers follow %s; waiting for it to serve or fall silent", leader
                )
                pause()
                return
            self.lead(self.campaign(takeover=True), from_standby=False)
            return
        self.lead(self.campaign(takeover=False), from_standby=False)

    def standby(self) -> None:
        self.role = "standby"
        self.start_postgres()
        log.info("standby: replaying the safekeepers' committed WAL")
        started = time.monotonic()
        while os.path.exists(self.standby_signal):
            self.start_postgres()
            self.consistent_now = self.consistent()
            states = self.safekeeper_states()
            if self.consistent_now and self.primary_lost(states):
                log.warning(
                    "a quorum of safekeepers has heard from no proposer for %.0f s: taking over",
                    self.cfg.failover_after,
                )
                self.consistent_now = False
                self.lead(self.campaign(takeover=True), from_standby=True)
                return
            if self.consistent_now:
                started = time.monotonic()
            elif time.monotonic() - started > STUCK_AFTER:
                # its base backup ends in WAL the quorum never got (the primary it copied was
                # deposed): the committed log can never make this copy consistent
                log.warning("not consistent after %.0f s of replay: rebuilding", STUCK_AFTER)
                self.rebuild()
                return
            pause()

    def consistent(self) -> bool:
        """Whether Postgres answers queries: a standby does once it reached a consistent state."""
        try:
            self.query("SELECT 1")
        except Exception:
            return False
        return True

    def campaign(self, takeover: bool) -> Proposer:
        """Win a term. The statuses that decided to stand may be seconds old (a status round
        waits out a cut-off safekeeper) and another compute may have won a term since, which
        would make two primaries of adjacent terms; so a takeover wins only votes of safekeepers
        still silent when they vote, and any other stand only while the safekeepers still
        follow nobody or this compute."""
        system_id = self.control()["Database system identifier"]
        p = Proposer(self.cfg.safekeepers, self.cfg.variant, proposer_id())
        if takeover:
            p.elect(system_id=system_id, quiet=self.cfg.failover_after)
        else:
            own = None if bugs.on("deposed-primary-serves") else is_ours
            p.elect(system_id=system_id, own=own)
        self.elections += 1
        return p

    def lead(self, p: Proposer, from_standby: bool) -> None:
        """Bring Postgres to the log of the term `p` won, stream until the term ends, and leave
        Postgres stopped (or, when it cannot continue the log, marked for a rebuild)."""
        self.role = "taking over"
        serves = bugs.on("deposed-primary-serves") or not self.cfg.computes
        # With another compute to take over, the primary holds a lease: it stops serving
        # once a quorum has been silent for most of the time a standby waits before acting.
        lease = None if serves else self.cfg.failover_after * LEASE_SHARE
        conninfo = (
            f"host=127.0.0.1 port={self.cfg.pg_port} user=postgres replication=true "
            f"application_name={self.cfg.slot}"
        )
        session = Session(conninfo, self.cfg.slot, p, lease, self.open_gate)
        STATUS.proposer = p
        self.lease = (p, lease) if lease else None
        limbo = None
        keep_serving = bugs.on("deposed-primary-serves") and self.serving and not from_standby
        try:
            if p.vcl:
                session.follow_all()
            if not keep_serving:
                self.stop_postgres("fast" if from_standby else "immediate")
                if p.vcl:
                    self.catch_up(p)
                session.check()
            if from_standby:
                os.unlink(self.standby_signal)
                self.takeovers += 1
            if self.cfg.mode == "confirm-rollback":
                limbo = Limbo(
                    self.cfg.local, self.cfg.pgdata, self.cfg.slot, self.cfg.synchro_timeout
                )
                limbo.close_gate()
            self.start_postgres()
            self.query(
                "SELECT pg_create_physical_replication_slot(slot_name, true) FROM "
                f"(VALUES ('{self.cfg.slot}')) AS s(slot_name) WHERE NOT EXISTS "
                f"(SELECT 1 FROM pg_replication_slots WHERE slot_name = '{self.cfg.slot}')"
            )
            self.role = "primary"
            if limbo is not None:
                self.limbo = limbo
                threading.Thread(target=limbo.run, daemon=True, name="limbo").start()
            threading.Thread(target=self.watch, args=(session,), daemon=True).start()
            session.run()
        except (Divergent, LogMismatch) as e:
            if bugs.on("deposed-primary-serves"):
                log.warning("%s; the planted bug keeps Postgres serving", e)
                return
            self.stop_postgres("immediate")
            self.mark_divergent(str(e))
        except Deposed as e:
            if bugs.on("deposed-primary-serves"):
                log.warning("deposed (%s); the planted bug keeps Postgres serving", e)
                return
            log.warning("deposed (%s): stopping Postgres", e)
            self.stop_postgres("immediate")
        except (NoQuorum, StreamError, Stalled) as e:
            log.warning("%s: stopping Postgres; standing again when it is this compute's turn", e)
            served = self.serving
            self.stop_postgres("immediate")
            if isinstance(e, StreamError) and not served:
                self.count_failure(p.vcl, e)
        except BaseException:
            self.stop_postgres("immediate")
            raise
        finally:
            session.close()
            STATUS.proposer = None
            if limbo is not None:
                limbo.stop.set()
                self.limbo = None  # its term is over: the status no longer speaks of it

    def catch_up(self, p: Proposer) -> None:
        """With Postgres stopped: compare its WAL with the log before VCL, and write the part of
        the log it lacks into pg_wal; raise Divergent if its WAL holds what the log does not."""
        control = self.control()
        size = int(control["Bytes per WAL segment"])
        redo = wire.parse_lsn(control["Latest checkpoint's REDO location"])
        user = pwd.getpwnam("postgres")
        wal = pgwal.LocalWal(self.cfg.pgdata, size, (user.pw_uid, user.pw_gid))
        end = self.wal_end(wal, redo)
        upto = min(end, p.vcl)
        lo = max(redo, p.log_start, upto - CHECK_SPAN)
        if lo < upto:
            ours, theirs = wal.read(lo, upto), read_log(p, lo, upto)
            if len(ours) < upto - lo:
                raise Divergent(f"pg_wal lacks WAL before {wire.lsn_str(lo + len(ours))}")
            at = pgwal.first_difference(ours, theirs)
            if at is not None:
                raise Divergent(
                    f"Postgres's WAL differs from the log of term {p.term} at "
                    f"{wire.lsn_str(lo + at)} (it ends at {wire.lsn_str(end)}, VCL "
                    f"{wire.lsn_str(p.vcl)}): it holds a tail the quorum never took"
                )
        plan = pgwal.CatchUp(end, p.vcl)
        if plan.fill:
            start, stop = plan.fill
            for pos in range(start, stop, pgwal.PAGE * 512):
                wal.write(pos, read_log(p, pos, min(stop, pos + pgwal.PAGE * 512)))
            wal.end_page_at(stop)
            log.info("wrote WAL %s..%s into pg_wal", wire.lsn_str(start), wire.lsn_str(stop))
        else:
            log.info(
                "Postgres's WAL (to %s) holds the log to VCL %s",
                wire.lsn_str(end),
                wire.lsn_str(p.vcl),
            )

    def wal_end(self, wal: pgwal.LocalWal, redo: int) -> int:
        """Where the stopped Postgres's valid WAL ends, as pg_waldump reads it from the REDO
        point of its last checkpoint. It reads no further than the segment files go: a record
        or a segment switch that leads past them would cost a 5 s wait for the next segment,
        on every election after a kill that left WAL so."""
        files_end = wal.files_end(redo)
        if files_end <= redo:
            raise Divergent(f"pg_wal lacks the segment of the REDO point {wire.lsn_str(redo)}")
        out = self._pg(
            f"pg_waldump -p {self.cfg.pgdata}/pg_wal -s {wire.lsn_str(redo)} "
            f"-e {wire.lsn_str(files_end)} 2>&1 | grep '^rmgr' | tail -n 1",
            check=False,
        ).stdout
        end = pgwal.last_record_end(out, wal.segment_size)
        if end is None:
            raise Divergent(f"pg_waldump finds no WAL record from {wire.lsn_str(redo)} on")
        return end

    def count_failure(self, vcl: int, error: Exception) -> None:
        """A stream that failed before serving, again at the same VCL, will fail at the next
        term too: stand down rather than let terms climb without the log moving."""
        last, count = self.failed_at
        count = count + 1 if last == vcl else 1
        self.failed_at = (vcl, count)
        if count >= FAILED_SESSIONS:
            self.failed_at = (0, 0)
            self.mark_divergent(
                f"{count} terms won at VCL {wire.lsn_str(vcl)} ended before serving ({error})"
            )

    def mark_divergent(self, reason: str) -> None:
        log.warning("%s: standing down; no election until this compute is rebuilt", reason)
        with open(self.divergent_marker, "w") as f:
            f.write(reason + "\n")
        self.role = "divergent"

    def watch(self, session: Session) -> None:
        """End the session when backends pile up waiting for the quorum (stop, never cancel)."""
        while not session.stop.wait(WATCH_INTERVAL):
            try:
                rows = self.query(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                )
            except Exception:
                continue
            if rows[0][0] > STALL_LIMIT:
                session.fail(Stalled(f"{rows[0][0]} backends wait for the quorum"))

    def rebuild(self, sources: list[str] | None = None) -> None:
        """A fresh copy of a compute whose Postgres is on the log, started as a standby."""
        self.role = "rebuilding" if not os.path.exists(self.divergent_marker) else "divergent"
        self.stop_postgres("immediate")
        sources = sources or self.sources()
        if not sources:
            raise RuntimeError("no compute serves or replays the log to copy from yet")
        target = self.cfg.pgdata + ".rebuild"
        for name in sources:
            host, port = self.cfg.computes[name]
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
            user = pwd.getpwnam("postgres")
            signal = os.path.join(target, "standby.signal")
            if not os.path.exists(signal):
                open(signal, "w").close()
                os.chown(signal, user.pw_uid, user.pw_gid)
            old = self.cfg.pgdata + ".old"
            shutil.rmtree(old, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.rename(self.cfg.pgdata, old)
            os.rename(target, self.cfg.pgdata)
            shutil.rmtree(old, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.divergent_marker)
            self.write_hba(open_=False)
            log.info("rebuilt from %s; now a standby", name)
            return
        raise RuntimeError(f"no base backup from {', '.join(sources)}")

    def serves(self) -> bool:
        """Whether Postgres may serve right now: the gate is open and, with a lease, a quorum
        answered within it (asked after a pause, this is false before the agent has caught up
        with what the pause did)."""
        if not self.serving:
            return False
        if self.lease is None:
            return True
        proposer, lease = self.lease
        return proposer.quorum_silent_for() <= lease

    def lease_left(self) -> float | None:
        """Seconds before the primary's lease ends unless a quorum answers (negative once it
        has: the primary then stops serving), or None without a lease."""
        if self.lease is None or self.role != "primary":
            return None
        proposer, lease = self.lease
        return round(lease - proposer.quorum_silent_for(), 2)

    def report(self) -> dict[str, Any]:
        state = {
            "compute": self.cfg.name,
            "role": self.role,
            "serving": self.serves(),
            "consistent": self.role == "standby" and self.consistent_now,
            "takeovers": self.takeovers,
            "elections": self.elections,
            "lease_left": self.lease_left(),
        }
        return state | (self.limbo.report() if self.limbo else {})


def statuses(daemons: dict[str, tuple[str, int]]) -> dict[str, dict[str, Any]]:
    """Every daemon's status at once (a cut-off one costs one timeout, not one each); the
    silent ones are left out."""

    def one(address: tuple[str, int]) -> dict[str, Any]:
        try:
            with wire.connect(address, 2.0) as sock:
                return wire.call(sock, {"type": "status"})[0]
        except (OSError, wire.ProtocolError):
            return {}

    with ThreadPoolExecutor(max(1, len(daemons))) as pool:
        replies = dict(zip(daemons, pool.map(one, daemons.values()), strict=True))
    return {name: reply for name, reply in replies.items() if reply.get("ok")}


def read_log(p: Proposer, start: int, end: int) -> bytes:
    """The log's bytes [start, end), from the safekeepers that hold them, in as many reads as
    they take."""
    out = bytearray()
    while start + len(out) < end:
        out += p.read_log(start + len(out), end)
    return bytes(out)


def pause() -> None:
    """A poll's wait, spread so that two computes that see the same thing do not act at once."""
    time.sleep(POLL * random.uniform(0.5, 1.5))


def serve(cfg: Config) -> None:
    agent = Agent(cfg)
    STATUS.agent = agent.report
    server = StatusServer(("0.0.0.0", cfg.status_port), StatusHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    front = Front(("0.0.0.0", cfg.client_port), ("127.0.0.1", cfg.pg_port), agent.serves)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    log.info(
        "compute agent %s: safekeepers %s, other computes %s, failover after %.0f s",
        cfg.name,
        sorted(cfg.safekeepers),
        sorted(cfg.computes),
        cfg.failover_after,
    )
    agent.run()
