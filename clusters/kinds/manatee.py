"""Cluster kind `manatee` (seed 004): `--peers N` Postgres 15 peers n1…nN (3 by default), each
with a sitter (package `systems/manatee`, copied onto the node and run with its python3), and a
ZooKeeper ensemble of three servers on nodes of their own after them. The sitters keep the
cluster state (generation, primary, sync, asyncs, init_wal) in ZooKeeper and give each peer its
role; n1's sitter starts first, so n1 declares the first generation as its primary.

The nodes use an image of their own (Debian's ZooKeeper jar on a headless JRE, kazoo), built on
the kind's first use. The harness sees the cluster as an operator does: the cluster state read
from ZooKeeper (kazoo, on the control machine), each peer through Postgres, the logs.

Where the seed is silent, `--on-session-loss`: `keep` (the seed as written: a primary whose
ZooKeeper session is gone keeps its Postgres serving) or `stop` (the sitter stops Postgres as
soon as its session is gone, the operator's obvious fix).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import psycopg

import systems
from checkers.cluster_state import DeposedAcknowledged, GenerationRules, QuietElections
from checkers.moments import LeaderChanged
from clusters.backend import Node
from clusters.image import MANATEE_IMAGE
from clusters.kinds import postgres as pg
from clusters.kinds.base import ClusterKind, Install, KindOption, Process
from clusters.kinds.on_node import (
    CLOCK_FILE,
    FAKETIME_LIB,
    ensure_clock_file,
    failover_endpoint,
    start_once,
    wait_until,
)
from core.endpoint import Endpoint
from core.polls import COORDINATION, ClusterStatePoll, PeerPoll, Record

SITTERS = systems.ROOT / "manatee"
INSTALL = "/opt/manatee"
STATE_DIR = "/var/lib/harness"
PGDATA = f"{STATE_DIR}/pgdata"  # the sitter keeps its role file and Postgres's log beside it
ZK_DATA = f"{STATE_DIR}/zookeeper"
ZK_PORT = 2181
ZK_SERVERS = 3
# Debian's jar names its other jars in its manifest, but not a logging binding: log4j 1.2's.
ZK_CLASSPATH = ":".join(
    f"/usr/share/java/{jar}.jar" for jar in ("zookeeper", "slf4j-log4j12", "log4j-1.2")
)
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZK_ROOT = "/manatee/harness"  # the sitters' --cluster is "harness"
DEFAULT_PEERS = 3
WHY_THREE = "(a primary, a sync and an async to replace one)"
ASK_TIMEOUT = 3.0  # seconds the harness waits for one answer from ZooKeeper
SESSION_TIMEOUT = 5.0  # the sitters' ZooKeeper sessions: how long a dead primary goes unnoticed
LOSS_CHOICES = ("keep", "stop")
ZK_CONF = """tickTime=1000
initLimit=10
syncLimit=5
dataDir={data}
clientPort={port}
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
quorumListenOnAllIPs=true
"""
LOG4J = """log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class ManateeCluster(ClusterKind):
    name = "manatee"
    about = (
        "seed 004: Postgres peers whose roles come from ZooKeeper; its nodes' image is built "
        "on first use"
    )
    realtime_order = True  # the seed promises one writable primary
    coordinated: ClassVar[bool] = True
    cli_options = (
        KindOption(
            "peers",
            int,
            f"Number of Postgres peers, 3 or more (default {DEFAULT_PEERS}): a primary, a sync "
            f"peer and a chain of asyncs; {ZK_SERVERS} ZooKeeper servers run on nodes after them.",
            default=DEFAULT_PEERS,
            check=lambda count: (
                None if count >= 3 else f"must be 3 or more {WHY_THREE}, not {count}"
            ),
        ),
        KindOption(
            "on_session_loss",
            str,
            "What a peer's sitter does with Postgres when its ZooKeeper session is gone: keep "
            "(default, seed 004 as written: it keeps serving) or stop (stop Postgres at once).",
            default=LOSS_CHOICES[0],
            choices=LOSS_CHOICES,
        ),
    )
    installed = (Install(SITTERS, "*.py", f"{INSTALL}/manatee"),)
    collected = (
        pg.LOG_DIR,
        f"{PGDATA}.log",  # Postgres's own log, beside its data
        f"{PGDATA}.manatee.role",
        f"{ZK_DATA}/zoo.cfg",
    )
    own_logs = (f"{pg.LOG_DIR}/sitter.log",)
    poll_records = (PeerPoll, ClusterStatePoll)
    state_rules = (GenerationRules, DeposedAcknowledged, QuietElections)
    moments = (LeaderChanged,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._zk: Any = None  # the control machine's kazoo client, once opened
        self._zk_lock = threading.Lock()
        self._made_primary: dict[str, int] = {}  # peer → the last generation it was P of

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["peers"]) + ZK_SERVERS

    @property
    def on_session_loss(self) -> str:
        return str(self.options["on_session_loss"])

    def peers(self) -> list[Node]:
        return self.nodes[: self.options["peers"]]

    def zookeepers(self) -> list[Node]:
        return self.nodes[self.options["peers"] :]

    def coordinators(self) -> list[str]:
        return [n.name for n in self.zookeepers()]

    # deploying

    def deploy(self, say: Callable[[str], None]) -> None:
        peers = self.options["peers"]
        parts = (
            f"n1…n{peers} Postgres peers, n{peers + 1}…n{self.node_count()} ZooKeeper "
            f"(image {MANATEE_IMAGE.name}, built on first use)"
        )
        self.bring_up(say, [pg.PORT, ZK_PORT], parts, MANATEE_IMAGE)
        say(f"starting the ZooKeeper ensemble on {', '.join(self.coordinators())}")
        for node in self.zookeepers():
            self.configure_zookeeper(node)
            self.start_zookeeper(node)
        wait_until("a ZooKeeper quorum", lambda: self._zk_quorum(), 120)
        say(
            f"starting the sitters (on session loss: {self.on_session_loss}); n1 first, so that "
            "it declares generation 1"
        )
        first, *others = self.peers()
        self.start_sitter(first)
        wait_until("n1's sitter in ZooKeeper", lambda: "n1" in self.present(), 60)
        for node in others:
            self.start_sitter(node)
        wait_until("generation 1", lambda: (self.cluster_state() or {}).get("generation"), 90)
        wait_until("the primary taking writes", lambda: self._read_write(first), 120)
        pg.ensure_database(first)
        for node in others:
            wait_until(
                f"{node.name} replicating", lambda n=node: self.peer_state(n).get("standby"), 180
            )

    def configure_zookeeper(self, node: Node) -> None:
        servers = "".join(
            f"server.{i}={z.name}:2888:3888\n" for i, z in enumerate(self.zookeepers(), start=1)
        )
        myid = self.coordinators().index(node.name) + 1
        node.put_file(f"{ZK_DATA}/zoo.cfg", (ZK_CONF.format(data=ZK_DATA, port=ZK_PORT)
                                              + servers).encode())  # fmt: skip
        node.put_file(f"{ZK_DATA}/myid", f"{myid}\n".encode())
        node.put_file(f"{INSTALL}/log4j.properties", LOG4J.encode())

    def start_zookeeper(self, node: Node) -> None:
        """Debian's ZooKeeper server, on the real clock (the JVM under libfaketime is not what
        a clock fault on a node is meant to test)."""
        java = (
            f"java -Xmx256m -Dlog4j.configuration=file:{INSTALL}/log4j.properties "
            f"-cp {ZK_CLASSPATH} {ZK_MAIN} {ZK_DATA}/zoo.cfg"
        )
        start_once(node, "[Q]uorumPeerMain", java, f"{pg.LOG_DIR}/zookeeper.log")

    def start_sitter(self, node: Node) -> None:
        """The peer's sitter, unless it runs: it starts Postgres in the role ZooKeeper gives."""
        ensure_clock_file(node)
        node.exec(f"mkdir -p {pg.LOG_DIR} {STATE_DIR} && chown postgres:postgres {STATE_DIR}")
        zookeeper = ",".join(f"{z}:{ZK_PORT}" for z in self.coordinators())
        faketime = {
            "LD_PRELOAD": FAKETIME_LIB,
            "FAKETIME_TIMESTAMP_FILE": CLOCK_FILE,
            "FAKETIME_NO_CACHE": "1",
        }
        env = " ".join(f"--pg-env {k}={v}" for k, v in faketime.items())
        stop = " --stop-on-session-loss" if self.on_session_loss == "stop" else ""
        cmd = (
            f"env PYTHONPATH={INSTALL} python3 -u -m manatee.sitter --zookeeper {zookeeper} "
            f"--cluster harness --name {node.name} --datadir {PGDATA} --port {pg.PORT} "
            f"--listen '*' --advertise {node.name}:{pg.PORT} "
            f"--session-timeout {SESSION_TIMEOUT:g} {env}{stop}"
        )
        start_once(node, "manatee[.]sitter", cmd, f"{pg.LOG_DIR}/sitter.log")

    # what clients and faults see

    def endpoints(self) -> list[Endpoint]:
        """Every client lists all peers and keeps to the one that takes writes, as an
        application would; each operation records the peer that served it."""
        return [failover_endpoint(self.peers(), pg.PORT, pg.DBNAME, pg.USER)]

    # Postgres is the sitter's to start, in the role the cluster state gives it.
    runs = (
        Process("sitter", r"-m manatee\.sitter", start_sitter),
        Process("postgres", f"{pg.PG_BIN}/postgres", start_sitter),
        Process("zookeeper", ZK_MAIN, start_zookeeper),
    )

    # reading the cluster's state

    def _client(self) -> Any:
        """A kazoo client on the control machine, to every server's published port; once
        started it reconnects by itself, and `_ask` bounds each request."""
        from kazoo.client import KazooClient  # here: the other kinds need no ZooKeeper client

        with self._zk_lock:
            if self._zk is None:
                # its reconnections are the faults at work, not news for the console
                logging.getLogger("kazoo").setLevel(logging.ERROR)
                hosts = ",".join("{}:{}".format(*z.endpoint(ZK_PORT)) for z in self.zookeepers())
                client = KazooClient(hosts=hosts, timeout=10)
                try:
                    client.start(timeout=10)
                except Exception:
                    client.close()
                    raise
                self._zk = client
            return self._zk

    def _ask(self, request: str, path: str) -> Any:
        """One read (`get` or `get_children`), waiting at most ASK_TIMEOUT: while ZooKeeper
        is out of reach a request would otherwise wait for it to come back."""
        client = self._client()
        return getattr(client, f"{request}_async")(path).get(timeout=ASK_TIMEOUT)

    def cluster_state(self) -> dict[str, Any] | None:
        """The cluster state as the sitters wrote it (generation, primary, sync, async,
        init_wal); None before the first generation or when ZooKeeper does not answer."""
        with contextlib.suppress(Exception):
            data, _ = self._ask("get", f"{ZK_ROOT}/state")
            return json.loads(data)
        return None

    def present(self) -> list[str]:
        """The peers whose ephemeral nodes exist, in ZooKeeper's order."""
        with contextlib.suppress(Exception):
            children = self._ask("get_children", f"{ZK_ROOT}/election")
            ordered = sorted(children, key=lambda c: c.rsplit("-", 1)[1])
            return list(dict.fromkeys(c.rsplit("-", 1)[0] for c in ordered))
        return []

    def _zk_quorum(self) -> bool:
        modes = [zookeeper_mode(z.endpoint(ZK_PORT)) for z in self.zookeepers()]
        return modes.count("leader") == 1 and modes.count("follower") == ZK_SERVERS - 1

    def peer_state(self, node: Node) -> dict[str, Any]:
        """What the peer's Postgres says of itself: writable, a standby, its WAL position;
        {} when it does not answer."""
        host, port = node.endpoint(pg.PORT)
        query = (
            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only'), "
            "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
            "ELSE pg_current_wal_lsn() END"
        )
        with contextlib.suppress(Exception):
            with psycopg.connect(
                host=host, port=port, user=pg.USER, dbname="postgres", connect_timeout=2,
                options="-c statement_timeout=2000",
            ) as conn:  # fmt: skip
                recovery, read_only, lsn = conn.execute(query).fetchone()  # type: ignore[misc]
            return {
                "standby": bool(recovery),
                "writable": not recovery and read_only == "off",
                "wal": str(lsn) if lsn else None,
            }
        return {}

    def _read_write(self, node: Node) -> bool:
        return bool(self.peer_state(node).get("writable"))

    def leader(self) -> str | None:
        """P of the current generation, as ZooKeeper holds it."""
        return (self.cluster_state() or {}).get("primary")

    def poll(self) -> dict[str, Record]:
        """Each peer's role in the current generation, whether its Postgres takes writes and,
        if it does, the generation in which it was made primary (the leader lane's): a deposed
        primary that still takes writes shows with its old generation. And the cluster state's
        G, P, S and init_wal, as ZooKeeper holds them."""
        state = self.cluster_state() or {}
        generation = state.get("generation")
        if state.get("primary") and generation:
            self._made_primary[state["primary"]] = generation
        peers = self.peers()
        with ThreadPoolExecutor(len(peers)) as pool:
            states = dict(
                zip([n.name for n in peers], pool.map(self.peer_state, peers), strict=True)
            )
        polled: dict[str, Record] = {}
        for name, own in states.items():
            if not own:
                continue
            polled[name] = PeerPoll(
                role_in(state, name),
                own["writable"],
                self._made_primary.get(name) if own["writable"] else None,
            )
        if generation:  # the cluster state itself, held to seed 004's rules by the checker
            fields = ("generation", "primary", "sync", "init_wal")
            polled[COORDINATION] = ClusterStatePoll({k: state.get(k) for k in fields})
        return polled

    def status(self) -> dict[str, Any]:
        """The generation, P, S, A[] and init_wal; per peer its role, whether ZooKeeper sees
        its session, what its Postgres is and its WAL position; each server's mode."""
        state = self.cluster_state()
        present = self.present()
        nodes: dict[str, dict[str, Any]] = {}
        for node in self.peers():
            own = self.peer_state(node)
            shown = (
                "not answering" if not own
                else "standby" if own["standby"]
                else "read-write" if own["writable"]
                else "read-only"
            )  # fmt: skip
            nodes[node.name] = {
                "role": role_in(state or {}, node.name),
                "in zookeeper": "yes" if node.name in present else "no",
                "postgres": shown,
                "wal": own.get("wal"),
            }
        for node in self.zookeepers():
            mode = zookeeper_mode(node.endpoint(ZK_PORT))
            nodes[node.name] = {"role": f"zookeeper ({mode or 'not answering'})"}
        return {
            "kind": self.name,
            "generation": (state or {}).get("generation"),
            "leader": (state or {}).get("primary"),
            "state": state,
            "present": present,
            "on_session_loss": self.on_session_loss,
            "nodes": nodes,
        }

    def teardown(self) -> list[str]:
        with self._zk_lock:
            if self._zk is not None:
                with contextlib.suppress(Exception):
                    self._zk.stop()
                    self._zk.close()
                self._zk = None
        return super().teardown()


def role_in(state: dict[str, Any], peer: str) -> str:
    """The peer's role in the cluster state: primary, sync, async k (its place in the chain,
    from 1), or none."""
    if state.get("primary") == peer:
        return "primary"
    if state.get("sync") == peer:
        return "sync"
    chain = state.get("async") or []
    return f"async {chain.index(peer) + 1}" if peer in chain else "none"


def zookeeper_mode(address: tuple[str, int]) -> str | None:
    """A ZooKeeper server's own account of its role (`srvr`): leader, follower, standalone;
    None when it does not answer or serves no quorum."""
    with contextlib.suppress(OSError):
        with socket.create_connection(address, timeout=2) as sock:
            sock.settimeout(2)
            sock.sendall(b"srvr")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
        for line in reply.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
    return None
