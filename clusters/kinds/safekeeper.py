"""Cluster kind `safekeeper` (seeds 000, 001, 003): `--computes C` compute nodes n1…nC running
Postgres 15 under a compute agent, and `--safekeepers N` nodes after them running a safekeeper
each. n1 starts as the primary, its proxy Postgres's synchronous standby; the other computes are
hot standbys replaying the safekeepers' committed WAL, and take over when the primary is lost.

The daemons (package `systems/walkeeper`) are copied onto the nodes as files and run there with
the node's python3; the harness never imports them. It sees the cluster as an operator does:
through Postgres, the daemons' logs and files, and `python3 -m walkeeper status` run on a node.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import systems
from checkers.cluster_state import (
    AcknowledgedOnQuorum,
    CommitHeld,
    DonorHoldsAcknowledged,
    HistoriesAgree,
    HistoryHeld,
    InheritedConfirmed,
    LogDivergence,
    OneProposerPerTerm,
    OneServing,
    QuietElections,
    Recovery,
    TermsForward,
    TermStarts,
)
from checkers.moments import (
    CatchUp,
    InheritedLimbo,
    LeaseEnding,
    Moment,
    Rebuild,
    Takeover,
    TermWon,
)
from clusters.backend import Node, NodeCommandError, shell_quote
from clusters.kinds import postgres as pg
from clusters.kinds.base import (
    SYNCHRO_TIMEOUT_OPTION,
    ClusterKind,
    ElectsByQuorum,
    Install,
    KindOption,
    Process,
    SwitchesWal,
)
from clusters.kinds.links import Link
from clusters.kinds.on_node import ensure_clock_file, failover_endpoint, start_once, wait_until
from core import store
from core.contract import LEGACY, Contract
from core.endpoint import Endpoint
from core.polls import ComputePoll, Record, SafekeeperPoll
from systems.walkeeper import bugs  # its lists of names: the modules the harness reads

DAEMONS = systems.ROOT / "walkeeper"
FRAME = struct.Struct(">II")  # the daemons' framing: header and payload lengths
DIGEST_SPAN = 4 << 20  # bytes of WAL per checksum compared across safekeepers
INSTALL = "/opt/walkeeper"
SK_PORT = 7676
PROXY_PORT = 7677
SK_PG_PORT = 5433  # a safekeeper's WAL server for Postgres standbys (streaming replication)
# A compute's Postgres listens here, on the loopback; its agent's front takes pg.PORT and drops
# clients' cancel requests (systems/walkeeper/front.py).
PG_INNER_PORT = 5434
SK_DATA = "/var/lib/harness/safekeeper"
SLOT = "walproposer"
AGENT = "walkeeper compute"  # the compute agent's command line, as pgrep and the kill fault see it
DAEMON = f"env PYTHONPATH={INSTALL} python3 -u -m walkeeper"
VARIANTS = ("term-history", "epoch")
BUGS = bugs.NAMES
DEFAULT_SAFEKEEPERS = 3
DEFAULT_COMPUTES = 2
# The compute agent's --mode for each contract, as the daemons name them.
DAEMON_MODES = {Contract.DURABLE: "safekeeper", Contract.CONFIRM_ROLLBACK: "confirm-rollback"}
# the link a connection fault may act on besides the clients': the elected proxy's stream to
# each safekeeper (votes, appends, commit positions), dialled from the compute it runs on
TO_SAFEKEEPER = Link("safekeeper", "each compute's proxy to each safekeeper")
FAILOVER_AFTER = 5.0  # seconds a quorum of safekeepers hears no proposer before a takeover
WAL_SEGMENT = 16 << 20  # the computes' WAL segment size (initdb's default)
# Runs on a safekeeper node (python3 -c DECODE_LOG WAL BASE END SEGMENT PG_BIN RMGR…): WAL, the
# log's bytes from BASE, cut into the segment files pg_waldump reads, which prints the records of
# the resource managers RMGR… up to END. The log may begin inside a segment, whose first page
# pg_waldump reads to learn the segment size: that page gets a long page header (the magic of
# the log's first whole page, XLP_LONG_HEADER, timeline 1, the segment's address), and the
# reading starts at that whole page.
DECODE_LOG = r"""
import os, struct, subprocess, sys, tempfile
wal, pg_bin, rmgrs = sys.argv[1], sys.argv[5], sys.argv[6:]
base, end, size = (int(a) for a in sys.argv[2:5])
PAGE = 8192
start = -(-base // PAGE) * PAGE
lsn = lambda x: "%X/%X" % (x >> 32, x & 0xFFFFFFFF)
with tempfile.TemporaryDirectory() as folder, open(wal, "rb") as f:
    f.seek(start - base)
    magic = f.read(2)
    for lo in range(start - start % size, end, size):
        name = "%08X%08X%08X" % (1, lo >> 32, (lo & 0xFFFFFFFF) // size)
        with open(os.path.join(folder, name), "wb") as out:
            out.truncate(size)
            if start > lo:
                out.write(magic + struct.pack("<HIQI4xQII", 2, 1, lo, 0, 0, size, PAGE))
            at, to = max(lo, start), min(lo + size, end)
            f.seek(at - base)
            out.seek(at - lo)
            while at < to:
                chunk = f.read(min(1 << 20, to - at))
                if not chunk:
                    break
                out.write(chunk)
                at += len(chunk)
    args = ["-p", folder, "-s", lsn(start), "-e", lsn(end), *(f"--rmgr={r}" for r in rmgrs)]
    done = subprocess.run([pg_bin + "/pg_waldump", *args], capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
"""

COMPUTE_CONF = f"""
listen_addresses = '127.0.0.1'
port = {PG_INNER_PORT}
synchronous_standby_names = '{SLOT}'
max_wal_senders = 10
max_replication_slots = 10
wal_sender_timeout = 60s
max_prepared_transactions = 100
# A rebuilt compute has no replication slot until it runs: the recent segments must outlive a
# restart's checkpoint, so that its proxy can stream from just before the VCL it won.
wal_keep_size = 256MB
"""


class SafekeeperCluster(ClusterKind, ElectsByQuorum, SwitchesWal):
    name = "safekeeper"
    about = "Postgres, proxy, safekeepers"
    realtime_order = True  # one primary at a time (the gate, the lease)
    _addresses: dict[str, tuple[str, int]] | None = None  # the daemons' status ports, once known
    cli_options = (
        KindOption(
            "safekeepers",
            int,
            f"Number of safekeeper nodes (default {DEFAULT_SAFEKEEPERS}).",
            default=DEFAULT_SAFEKEEPERS,
            least=1,
        ),
        KindOption(
            "computes",
            int,
            f"Number of compute nodes (default {DEFAULT_COMPUTES}): one primary, the others "
            "standbys that take over when it is lost.",
            default=DEFAULT_COMPUTES,
            least=1,
        ),
        KindOption(
            "bug",
            str,
            "Plant bugs the harness must catch (off by default), comma-separated: "
            + ", ".join(BUGS)
            + ". See systems/walkeeper/bugs.py for the guarantee each breaks.",
            check=lambda given: unknown_bug(given),
        ),
        KindOption(
            "mode",
            str,
            "The contract: durable (default), a commit returns once a quorum has its WAL; "
            "confirm-rollback (seed 002), clients PREPARE, the leader confirms once a quorum has "
            "it or rolls back after --synchro-timeout (docs/safekeeper.md says what a client "
            "sees). safekeeper is the old name of durable.",
            default=Contract.DURABLE.value,
            choices=tuple(c.value for c in Contract),
            aliases=LEGACY,
        ),
        SYNCHRO_TIMEOUT_OPTION,
        KindOption(
            "variant",
            str,
            "Election protocol: term-history (seed 003, default) or epoch (seed 001 as written).",
            default=VARIANTS[0],
            choices=VARIANTS,
        ),
    )
    installed = (Install(DAEMONS, "*.py", f"{INSTALL}/walkeeper"),)
    collected = (pg.LOG_DIR, f"{SK_DATA}/control.json")
    own_logs = (f"{pg.LOG_DIR}/safekeeper.log", f"{pg.LOG_DIR}/compute.log")
    poll_records = (ComputePoll, SafekeeperPoll)
    state_rules = (
        OneServing,
        TermStarts,
        HistoriesAgree,
        HistoryHeld,
        OneProposerPerTerm,
        TermsForward,
        CommitHeld,
        AcknowledgedOnQuorum,
        DonorHoldsAcknowledged,
        LogDivergence,
        InheritedConfirmed,
        QuietElections,
        Recovery,
    )
    moments = (TermWon, Takeover, CatchUp, Rebuild, LeaseEnding, InheritedLimbo)
    links = (TO_SAFEKEEPER,)

    @classmethod
    def moments_of(cls, options: Mapping[str, Any]) -> tuple[type[Moment], ...]:
        """A limbo holds transactions only under confirm/rollback."""
        if cls.contract_of(options) is Contract.CONFIRM_ROLLBACK:
            return cls.moments
        return tuple(m for m in cls.moments if m is not InheritedLimbo)

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["computes"]) + int(options["safekeepers"])

    @classmethod
    def contract_of(cls, options: Mapping[str, Any]) -> Contract:
        return Contract.parse(options["mode"])

    @property
    def variant(self) -> str:
        return str(self.options["variant"])

    @property
    def contract_in_force(self) -> Contract:
        return self.contract_of(self.options)

    @property
    def bug_flag(self) -> str:
        return "".join(f" --bug {bug}" for bug in planted(self.options["bug"]))

    def computes(self) -> list[Node]:
        return self.nodes[: self.options["computes"]]

    def safekeepers(self) -> list[Node]:
        return self.nodes[self.options["computes"] :]

    def deploy(self, say: Callable[[str], None]) -> None:
        count = self.node_count()
        computes = self.options["computes"]
        # the daemons' status ports too: the harness polls them during a run
        self.bring_up(
            say,
            [pg.PORT, SK_PORT, PROXY_PORT],
            f"n1…n{computes} computes, n{computes + 1}…n{count} safekeepers",
        )
        say(f"starting {count - computes} safekeepers ({self.variant})")
        for node in self.safekeepers():
            self.start_safekeeper(node)
        say(
            "initialising Postgres 15 on n1, the primary, with the proxy as its synchronous standby"
        )
        primary, *standbys = self.computes()
        pg.init(primary, self.compute_conf())
        self.start_agent(primary)
        wait_until("the proxy's election", lambda: self.agent_status(primary).get("elected"), 90)
        wait_until("a commit through the safekeepers", lambda: self._commit_works(primary), 60)
        wait_until("n1 serving clients", lambda: self.agent_status(primary).get("serving"), 60)
        pg.ensure_database(primary)
        for node in standbys:
            say(f"making {node.name} a standby: a base backup of n1, then the safekeepers' WAL")
            base_backup(node, primary)
            self.start_agent(node)
        for node in standbys:
            wait_until(f"{node.name} replaying as a standby", lambda n=node: in_recovery(n), 90)

    def compute_conf(self) -> str:
        """Postgres's settings on every compute: a primary's, and where a standby streams from
        (ignored until it is one): the safekeepers' WAL servers, whichever answers."""
        hosts = ",".join(n.name for n in self.safekeepers())
        ports = ",".join(str(SK_PG_PORT) for _ in self.safekeepers())
        return COMPUTE_CONF + (
            f"primary_conninfo = 'host={hosts} port={ports} user={pg.USER} "
            "application_name=standby connect_timeout=3'\n"
        )

    def _commit_works(self, node: Node) -> bool:
        """A write commits. The client gives up by being killed: statement_timeout does not
        end a commit's wait for the standby, and a cancelled wait returns COMMIT anyway (with a
        warning), which would pass."""
        sql = "CREATE TABLE IF NOT EXISTS probe(x int); INSERT INTO probe VALUES (1)"
        cmd = f"timeout 5 {pg.PG_BIN}/psql -h 127.0.0.1 -U {pg.USER} -d postgres -qc "
        return node.exec(cmd + shell_quote(sql), check=False).code == 0

    def start_safekeeper(self, node: Node) -> None:
        """The safekeeper daemon, unless it runs.

        Unlike Postgres, the daemons keep the real clock: libfaketime 0.9.10 does not intercept
        the sem_clockwait behind Python's timed lock waits, which then never time out (seen as a
        proxy that never reconnects). They take no decision from the wall clock, so a skewed
        clock would have nothing to act on in them anyway."""
        args = (
            f"safekeeper --name {node.name} --data {SK_DATA} --listen 0.0.0.0:{SK_PORT} "
            f"--variant {self.variant} --pg-listen 0.0.0.0:{SK_PG_PORT}{self.bug_flag}"
        )
        start_once(
            node, "walkeeper [s]afekeeper", f"{DAEMON} {args}", f"{pg.LOG_DIR}/safekeeper.log"
        )

    def start_agent(self, node: Node) -> None:
        """The compute agent, unless it runs: it starts (or rebuilds) Postgres as it decides;
        so Postgres on a compute is the agent's to start, which first asks the safekeepers
        whether this node may still be a primary."""
        ensure_clock_file(node)
        peers = ""
        for sk in self.safekeepers():
            host, port = self.dial(node, TO_SAFEKEEPER, sk.name, SK_PORT)
            peers += f" --safekeeper {sk.name}={host}:{port}"
        others = " ".join(
            f"--compute {n.name}={n.name}:{pg.PORT}" for n in self.computes() if n.name != node.name
        )
        args = (
            f"compute --name {node.name} --pgdata {pg.PGDATA} --pg-bin {pg.PG_BIN} "
            f"--pg-start {shell_quote(pg.start_command())} --slot {SLOT}{peers} {others} "
            f"--variant {self.variant} --status-port {PROXY_PORT} "
            f"--client-port {pg.PORT} --pg-port {PG_INNER_PORT} "
            f"--failover-after {FAILOVER_AFTER:g} --mode {DAEMON_MODES[self.contract_in_force]} "
            f"--synchro-timeout {self.options['synchro_timeout']:g}{self.bug_flag}"
        )
        start_once(node, "walkeeper [c]ompute", f"{DAEMON} {args}", f"{pg.LOG_DIR}/compute.log")

    runs = (
        Process("postgres", f"{pg.PG_BIN}/postgres", start_agent),
        Process("proxy", AGENT, start_agent),
        Process("safekeeper", "walkeeper safekeeper", start_safekeeper),
    )

    def endpoints(self) -> list[Endpoint]:
        """Every client lists all computes and keeps to the one that accepts writes, as an
        application would; each operation records the compute that served it."""
        return [
            failover_endpoint(
                self.computes(),
                pg.PORT,
                pg.DBNAME,
                pg.USER,
                two_phase=self.contract_in_force is Contract.CONFIRM_ROLLBACK,
            )
        ]

    def switch_wal(self, node: str) -> str:
        return pg.psql(next(n for n in self.nodes if n.name == node), "SELECT pg_switch_wal()")

    def agent_status(self, node: Node) -> dict[str, Any]:
        return daemon_status(node, PROXY_PORT)

    def proxy_status(self) -> dict[str, Any]:
        """The elected proxy's state: the leader's agent ({} when none is elected)."""
        states = [self.agent_status(n) for n in self.computes()]
        elected = [s for s in states if s.get("elected")]
        return max(elected, key=lambda s: s.get("term", 0), default={})

    def leader(self) -> str | None:
        """The compute whose proxy holds the highest elected term."""
        return self.proxy_status().get("compute")

    def status(self) -> dict[str, Any]:
        """Who leads, the term, each compute's role, and every node's flush and commit LSNs with
        its term history (or epoch, in the epoch variant), as the daemons report them; a
        safekeeper that does not answer (killed, paused) is shown from its control file."""
        nodes: dict[str, dict[str, Any]] = {}
        leader: dict[str, Any] = {}
        for node in self.computes():
            agent = self.agent_status(node)
            if agent.get("elected") and agent.get("term", 0) > leader.get("term", 0):
                leader = agent
            role = agent.get("role", "agent not answering")
            marks = [m for m in ("elected", "serving") if agent.get(m)]
            nodes[node.name] = {
                "role": f"compute: {role}" + (f" ({', '.join(marks)})" if marks else ""),
                "postgres": "up" if pg.is_ready(node) else "down",
            }
            if agent.get("elected"):
                log_end = {"flush_lsn": agent.get("log_end"), "epoch": agent.get("term")}
                nodes[node.name] |= positions(agent | log_end)
        variant = leader.get("variant", self.variant)
        for node in self.safekeepers():
            state = daemon_status(node, SK_PORT)
            role = "safekeeper"
            if not state:
                state = read_control(node) | {"variant": variant}
                role = "safekeeper (not answering)"
            nodes[node.name] = {"role": role} | positions(state)
        return {
            "kind": self.name,
            "variant": variant,
            "leader": leader.get("compute"),
            "term": leader.get("term"),
            "nodes": nodes,
        }

    def poll(self) -> dict[str, Record]:
        """Each compute's role, whether it serves and in which term; each safekeeper's term,
        term history, flush and commit LSN: from the daemons' status ports, all at once."""
        if self._addresses is None:
            ports = {n.name: PROXY_PORT for n in self.computes()}
            ports |= {n.name: SK_PORT for n in self.safekeepers()}
            self._addresses = {n.name: n.endpoint(ports[n.name]) for n in self.nodes}
        addresses = self._addresses
        with ThreadPoolExecutor(len(addresses)) as pool:
            states = dict(zip(addresses, pool.map(ask_status, addresses.values()), strict=True))
        computes = {n.name for n in self.computes()}
        polled: dict[str, Record] = {}
        for name, state in states.items():
            if not state.get("ok"):
                continue
            if name in computes:
                elected = bool(state.get("elected"))
                polled[name] = ComputePoll(
                    state.get("role"),
                    bool(state.get("serving")),
                    state.get("term") if elected else None,
                    state.get("donor") if elected else None,
                    state.get("limbo"),
                    state.get("taking_writes"),
                    state.get("lease_left"),
                    state.get("consistent"),
                )
            else:
                polled[name] = keeper_poll(state)
        return polled

    def wal_digests(self) -> dict[str, Any]:
        """Each safekeeper's SHA-256 of each DIGEST_SPAN of its WAL, from where their logs
        begin up to the commit LSN it reports (below it, its log is the committed log, whatever
        uncommitted tail it holds past it): the cluster-state checker compares them (two
        safekeepers must hold the same bytes wherever both hold a range of the committed log)."""
        addresses = {n.name: n.endpoint(SK_PORT) for n in self.safekeepers()}
        states = {name: ask_status(address, 5.0) for name, address in addresses.items()}
        answered = {name: s for name, s in states.items() if s.get("ok") and s.get("base_lsn")}
        if not answered:
            return {}
        commit = max(s.get("commit_lsn") or 0 for s in answered.values())
        start = max(s["base_lsn"] for s in answered.values())
        digests: dict[str, list[list[Any]]] = {name: [] for name in answered}
        for lo in range(start, commit, DIGEST_SPAN):
            for name, state in answered.items():
                # only what this safekeeper knows committed: below that, its log is the log
                hi = min(lo + DIGEST_SPAN, commit, state.get("commit_lsn") or 0)
                if hi <= lo:
                    continue
                reply = ask(addresses[name], {"type": "checksum", "start": lo, "end": hi}, 30.0)
                if reply.get("ok") and reply["end"] > lo:
                    digests[name].append([lo, reply["end"], reply["sha256"]])
        return {"commit_lsn": commit, "start": start, "span": DIGEST_SPAN, "digests": digests}

    def log_transactions(self) -> dict[str, Any]:
        """The committed log's two-phase records (PREPARE, COMMIT and ROLLBACK PREPARED) and the
        boundaries between the Postgres instances that wrote it, as pg_waldump decodes them from
        the WAL of the safekeeper that reports the highest commit LSN, with its term history:
        the inherited-confirmed rule reads which instance decided each transaction an earlier
        one prepared ({} when none answers)."""
        states = {n: ask_status(n.endpoint(SK_PORT), 5.0) for n in self.safekeepers()}
        answered = [(n, s) for n, s in states.items() if s.get("ok") and s.get("base_lsn")]
        if not answered:
            return {}
        node, state = max(answered, key=lambda a: (a[1].get("commit_lsn") or 0, -a[1]["base_lsn"]))
        base, end = int(state["base_lsn"]), int(state.get("commit_lsn") or 0)
        if end <= base:
            return {}
        read = {"node": node.name, "from_lsn": base, "to_lsn": end}
        try:
            out = decode_log(node, f"{SK_DATA}/wal", base, end)
        except NodeCommandError as e:
            return read | {"error": str(e)}
        return read | {"history": state.get("history") or [], "records": pg.two_phase_records(out)}

    def final_state(self) -> dict[str, Any]:
        wal = self.wal_digests()
        if self.contract_in_force is Contract.CONFIRM_ROLLBACK:
            wal["transactions"] = self.log_transactions()
        return super().final_state() | {store.WAL_DIGESTS: wal}


def decode_log(node: Node, wal: str, base: int, end: int) -> str:
    """pg_waldump's lines for the records two_phase_records reads of the log in the file `wal`
    on `node`, whose first byte is at LSN `base`, up to LSN `end` (DECODE_LOG)."""
    rmgrs = " ".join(pg.TWO_PHASE_RMGRS)
    args = f"{shell_quote(wal)} {base} {end} {WAL_SEGMENT} {pg.PG_BIN} {rmgrs}"
    return node.read(f"python3 -c {shell_quote(DECODE_LOG)} {args}")


def planted(given: str | None) -> list[str]:
    """The planted bugs a `--bug` names (comma-separated)."""
    return [b.strip() for b in (given or "").split(",") if b.strip()]


def unknown_bug(given: str) -> str | None:
    """What is wrong with a `--bug`: a name that is no planted bug."""
    unknown = [bug for bug in planted(given) if bug not in BUGS]
    return (
        f"names no planted bug {unknown[0]!r}: choose from {', '.join(BUGS)}" if unknown else None
    )


def base_backup(node: Node, source: Node) -> None:
    """A standby's data directory: a copy of the primary's, marked to start in standby mode.
    Without WAL: the standby replays only committed WAL, from the safekeepers (see the compute
    agent's rebuild)."""
    node.exec(
        f"mkdir -p {pg.LOG_DIR} /var/lib/harness && rm -rf {pg.PGDATA} && "
        f"chown postgres:postgres {pg.LOG_DIR} /var/lib/harness"
    )
    node.exec(
        pg.as_postgres(
            f"{pg.PG_BIN}/pg_basebackup -h {source.name} -p {pg.PORT} -U {pg.USER} "
            f"-D {pg.PGDATA} -X none -c fast && touch {pg.PGDATA}/standby.signal"
        )
    )


def in_recovery(node: Node) -> bool:
    return pg.psql(node, "SELECT pg_is_in_recovery()") == "t"


def keeper_poll(state: dict[str, Any]) -> SafekeeperPoll:
    """What a poll keeps of a safekeeper's status."""
    return SafekeeperPoll(**{key: state.get(key) for key in SafekeeperPoll.__struct_fields__})


def ask_status(address: tuple[str, int], timeout: float = 1.0) -> dict[str, Any]:
    """A daemon's status over its own protocol, as an operator's probe asks it."""
    return ask(address, {"type": "status"}, timeout)


def ask(address: tuple[str, int], what: dict[str, Any], timeout: float = 1.0) -> dict[str, Any]:
    """One request to a daemon over its own protocol (two big-endian lengths, a JSON header, a
    payload); {} when it does not answer in time."""
    request = json.dumps(what).encode()
    try:
        with socket.create_connection(address, timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(FRAME.pack(len(request), 0) + request)
            head, payload = FRAME.unpack(_exactly(sock, FRAME.size))
            reply = json.loads(_exactly(sock, head))
            _exactly(sock, payload)
    except (OSError, ValueError, struct.error):
        return {}
    return reply if isinstance(reply, dict) else {}


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        data += chunk
    return bytes(data)


def daemon_status(node: Node, port: int) -> dict[str, Any]:
    """A daemon's own account of its state, asked from here as the poll asks it; {} when it
    does not answer within 5 s (stopped, paused). Not through the node's shell: Docker's exec
    has been seen to hand back no output for a command that printed (docker/docker-py#2042),
    which read as a daemon not answering in a cluster's final status."""
    state = ask_status(node.endpoint(port), 5.0)
    return state if state.get("ok") else {}


def read_control(node: Node) -> dict[str, Any]:
    """A safekeeper's state from its files: the control file, and the flush LSN from the WAL
    file's length (what the daemon itself computes when it starts)."""
    out = node.exec(
        f"cat {SK_DATA}/control.json && echo && stat -c %s {SK_DATA}/wal", check=False
    ).output
    try:
        control, size = out.strip().rsplit("\n", 1)
        state = json.loads(control)
    except ValueError:
        return {}
    if state.get("base_lsn"):
        state["flush_lsn"] = state["base_lsn"] + int(size)
    return state


def positions(state: dict[str, Any]) -> dict[str, Any]:
    """The columns an operator compares across nodes."""
    shown = {
        "term": state.get("term"),
        "flush_lsn": lsn_text(state.get("flush_lsn")),
        "commit_lsn": lsn_text(state.get("commit_lsn")),
    }
    if state.get("variant") == "epoch":
        return shown | {"epoch": state.get("epoch")}
    return shown | {"history": history_text(state.get("history"))}


def lsn_text(lsn: int | None) -> str:
    return "" if lsn is None else f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def history_text(history: list[list[int]] | None) -> str:
    return " ".join(f"{term}@{lsn_text(start)}" for term, start in history or [])
