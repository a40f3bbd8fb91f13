"""Every fault observed on real nodes: it really happens, and heal really undoes it.

Every test runs on each backend that can run here (docker, local). Two module clusters: five
plain nodes that run a small TCP/UDP echo server as their "cluster process" (for partitions,
packet faults and the clock), and the `single` Postgres cluster (for kill, pause and the clock as
a database sees it). Network measurements run between the nodes; only the Postgres clients
connect from here, to the node's endpoint. After every test the nodes are healed, whatever
happened.
"""

from __future__ import annotations

import json
import random
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from itertools import permutations
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rich.console import Console

from clusters.backend import READ_TRIES, Backend, Node
from clusters.kinds import postgres as pg
from clusters.kinds.base import ClusterKind, KindOption
from clusters.kinds.on_node import ensure_clock_file, under_faketime
from clusters.kinds.single import SingleCluster
from core.endpoint import Endpoint
from core.errors import BadInput, InfraError
from core.history import HistoryWriter
from nemesis import build, grudges, heal_nodes, packet
from nemesis.clock import Clock, offset_set
from nemesis.grudges import Grudge
from nemesis.kill import Kill
from nemesis.packet import Packet
from nemesis.partition import PRIMARY_COORDINATORS, Partition
from nemesis.pause import Pause
from nemesis.processes import kill_tree, process_table, send, tree, wait_gone

PORT = 7000
ECHO_PATH = "/opt/harness-test/echo.py"
PROBE_PATH = "/opt/harness-test/probe.py"
SEEN = "/tmp/udp-seen"

ECHO = f'''
"""TCP and UDP echo on port {PORT}; every UDP payload is also appended to {SEEN}."""
import socket, threading

def serve(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)

def tcp():
    server = socket.create_server(("0.0.0.0", {PORT}))
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()

threading.Thread(target=tcp, daemon=True).start()
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("0.0.0.0", {PORT}))
with open("{SEEN}", "ab", buffering=0) as seen:
    while True:
        data, peer = udp.recvfrom(65536)
        seen.write(data + b"\\n")
        udp.sendto(data, peer)
'''.encode()

PROBE = f'''
"""Measurements from this node to another's echo server; prints one JSON object."""
import json, socket, statistics, sys, threading, time

def tcp(host):
    try:
        # 2.5 s covers one lost SYN (retried after 1 s) and a slow echo on a loaded machine:
        # a link that is cut fails however long it is given.
        with socket.create_connection((host, {PORT}), timeout=2.5) as s:
            s.sendall(b"x")
            return {{"ok": s.recv(1) == b"x"}}
    except OSError as e:
        return {{"ok": False, "error": str(e)}}

def udp(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, {PORT}))
    return s

def rtt(host, count):
    s, times = udp(host), []
    s.settimeout(1.0)
    for i in range(count):
        start = time.monotonic()
        try:
            s.send(str(i).encode())
            while int(s.recv(100)) != i:  # a late reply to an earlier ping
                pass
            times.append(time.monotonic() - start)
        except (socket.timeout, PermissionError):  # lost, or dropped on this node's output
            pass
    return {{"median": statistics.median(times) if times else None, "replies": len(times)}}

def burst(host, count):
    s, got, refused = udp(host), [], 0
    s.settimeout(1.5)

    def receive():  # while sending: the socket's buffer would not hold every reply
        try:
            while True:
                got.append(int(s.recv(100)))
        except socket.timeout:
            pass

    receiver = threading.Thread(target=receive)
    receiver.start()
    for i in range(count):
        try:
            s.send(str(i).encode())
        except PermissionError:  # an iptables DROP on this node's output
            refused += 1
        time.sleep(0.002)
    receiver.join()
    inversions = sum(1 for a, b in zip(got, got[1:]) if b < a)
    return {{"sent": count, "refused": refused, "received": len(got),
            "distinct": len(set(got)), "inversions": inversions}}

def bulk(host, size):
    s = socket.create_connection((host, {PORT}), timeout=30)
    start, received = time.monotonic(), 0
    threading.Thread(target=s.sendall, args=(b"x" * size,), daemon=True).start()
    while received < size:
        received += len(s.recv(65536))
    return {{"seconds": time.monotonic() - start}}

def send(host, token):
    try:
        udp(host).send(token.encode())
        return {{"refused": False}}
    except PermissionError:  # an iptables DROP on this node's output
        return {{"refused": True}}

what, host, arg = sys.argv[1], sys.argv[2], (sys.argv[3:] or [""])[0]
fn = {{"tcp": tcp, "rtt": rtt, "burst": burst, "bulk": bulk, "send": send}}[what]
print(json.dumps(fn(host, int(arg)) if arg.isdigit() else fn(host, *sys.argv[3:])))
'''.encode()


class PlainCluster(ClusterKind):
    """Plain nodes whose one process is the echo server; the leader is whatever the test says."""

    name = "plain"
    leader_name: str | None = "n1"
    cli_options = (KindOption("count", int, "How many nodes.", default=5, least=1),)

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["count"])

    def deploy(self, say: Callable[[str], None]) -> None:
        nodes = self.backend.up(self.cluster, self.node_count(), [])
        for node in nodes:
            node.put_file(ECHO_PATH, ECHO)
            node.put_file(PROBE_PATH, PROBE)
            self.start_process(node, "echo")

    def start_process(self, node: Node, name: str) -> None:
        """As every cluster kind does: under the node's faked clock."""
        ensure_clock_file(node)
        node.exec(under_faketime(f"python3 {ECHO_PATH}") + " >/dev/null 2>&1", detach=True)
        eventually(lambda: probe(node, "tcp", "127.0.0.1")["ok"], f"echo on {node.name}")

    def endpoints(self) -> list[Endpoint]:
        return []

    def processes(self) -> dict[str, str]:
        return {"echo": re.escape(ECHO_PATH)}

    def leader(self) -> str | None:
        return self.leader_name

    def status(self) -> dict[str, Any]:
        return {}


def eventually(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if result := check():
                return result
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.2)


def probe(node: Node, what: str, host: str, *args: object) -> dict[str, Any]:
    cmd = f"python3 {PROBE_PATH} {what} {host} {' '.join(map(str, args))}"
    # Docker's exec has been seen to hand back no output at all for a command that printed
    # (with the local backend's tests running beside): asked again, it answers.
    for _ in range(3):
        if lines := node.exec(cmd).output.strip().splitlines():
            return dict(json.loads(lines[-1]))
    raise AssertionError(f"the probe on {node.name} printed nothing three times: {cmd}")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("local", marks=pytest.mark.local),
    ],
)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "docker":
        docker: Backend = request.getfixturevalue("docker_backend")
        return docker
    from clusters.local_backend import LocalBackend

    try:
        local = LocalBackend(console=Console(stderr=True))
    except BadInput as exc:
        pytest.skip(str(exc))
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # whoever waits sees the rootfs being made
        local.rootfs()
    return local


def cluster_of(backend: Backend, kind: type[ClusterKind], options: dict[str, Any]) -> Iterator[Any]:
    """A cluster of `kind` under a name of its own, always taken down afterwards (on the power
    layer, what its setup wrote is on disk first, as the runner has it)."""
    name = f"t{secrets.token_hex(4)}"
    try:
        cluster = kind(backend, name, options)
        try:
            cluster.deploy(lambda msg: None)
        except InfraError as e:
            raise InfraError(f"{e}\n{log_tails(cluster)}") from e
        if backend.power:
            for node in cluster.nodes:
                node.sync_power()
        yield cluster
    finally:
        backend.down(name)


def log_tails(cluster: ClusterKind, lines: int = 12) -> str:
    """The last lines of each node's logs, for a cluster that did not come up: the test's
    teardown takes the nodes, and a daemon's own account of what failed is only there."""
    with tempfile.TemporaryDirectory() as kept:
        try:
            cluster.collect_files(Path(kept))
        except Exception as e:  # a node gone too: say so, and what the error was stays first
            return f"(the nodes' logs could not be read: {e})"
        tails = []
        for log in sorted(Path(kept).glob("*/**/*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            if text:
                tails.append(f"--- {log.relative_to(kept)}\n" + "\n".join(text))
        return "\n".join(tails) or "(no node wrote a log)"


@pytest.fixture(scope="module")
def plain(backend: Backend) -> Iterator[PlainCluster]:
    yield from cluster_of(backend, PlainCluster, {"count": 5})


@pytest.fixture(scope="module")
def single(backend: Backend) -> Iterator[SingleCluster]:
    yield from cluster_of(backend, SingleCluster, {})


@pytest.fixture
def nodes(plain: PlainCluster) -> Iterator[list[Node]]:
    """The plain cluster's nodes, healed after the test whatever it did."""
    yield plain.nodes
    plain.leader_name = "n1"
    heal_nodes(plain.nodes)
    for node in plain.nodes:
        if not tree(process_table(node), re.escape(ECHO_PATH)):
            plain.start_process(node, "echo")


@pytest.fixture
def db(single: SingleCluster) -> Iterator[SingleCluster]:
    """The single cluster, healed and with Postgres running after the test whatever it did."""
    yield single
    heal_nodes(single.nodes)
    pg.start(single.nodes[0])


def reachable(nodes: list[Node]) -> dict[tuple[str, str], bool]:
    """(from, to) → a TCP exchange works, for every ordered pair, probed all at once. A pair
    that fails is probed once more: on a loaded machine a reachable peer may miss a probe's
    wait, and a cut link fails both times."""
    by_name = {n.name: n for n in nodes}
    pairs = list(permutations(by_name, 2))
    seen: dict[tuple[str, str], bool] = {}
    with ThreadPoolExecutor(len(pairs)) as pool:
        for asked in (pairs, [p for p in pairs if not seen.get(p)]):
            results = pool.map(lambda p: probe(by_name[p[0]], "tcp", p[1])["ok"], asked)
            seen |= dict(zip(asked, results, strict=True))
    return seen


def expected(grudge: Grudge) -> dict[tuple[str, str], bool]:
    """TCP needs both directions: a reaches b when neither holds a grudge against the other."""
    return {(a, b): b not in grudge[a] and a not in grudge[b] for a, b in permutations(grudge, 2)}


# --- partition -----------------------------------------------------------------------------


def test_majority_partition_cuts_across_sides_not_within_and_heals(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    names = [n.name for n in nodes]
    assert all(reachable(nodes).values())
    fault = Partition.planned("majority", names, random.Random(7))
    value = fault.start(plain)
    grudge = {n: frozenset(v) for n, v in value["grudge"].items()}
    sides = {frozenset(grudge[n]) for n in names}
    assert len(sides) == 2 and value["mechanism"] == "iptables"
    seen = reachable(nodes)
    assert seen == expected(grudge)
    assert any(seen.values()) and not all(seen.values())  # within a side yes, across no
    fault.stop(plain)
    assert all(reachable(nodes).values())


@pytest.mark.parametrize("shape", ["one", "majorities-ring", "halves", "bridge", "primaries"])
def test_every_shape_cuts_exactly_its_grudge(
    plain: PlainCluster, nodes: list[Node], shape: str
) -> None:
    plain.leader_name = "n3"
    fault = Partition.planned(shape, [n.name for n in nodes], random.Random(shape))
    value = fault.start(plain)
    grudge = {n: frozenset(v) for n, v in value["grudge"].items()}
    if shape == "primaries":
        assert grudge["n3"] == {"n1", "n2", "n4", "n5"}
    assert reachable(nodes) == expected(grudge)
    fault.stop(plain)
    assert all(reachable(nodes).values())


def test_the_primary_cut_off_from_the_coordinators_only_still_reaches_its_peers(
    plain: PlainCluster, nodes: list[Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    """partition-dcs's shape: the leader loses the coordination service's nodes and no
    other; everyone else hears everyone."""
    plain.leader_name = "n2"
    monkeypatch.setattr(plain, "coordinators", lambda: ["n4", "n5"])
    fault = Partition.planned(PRIMARY_COORDINATORS, [n.name for n in nodes], random.Random(0))
    value = fault.start(plain)
    seen = reachable(nodes)
    assert [pair for pair, ok in seen.items() if not ok] == [
        ("n2", "n4"), ("n2", "n5"), ("n4", "n2"), ("n5", "n2"),
    ]  # fmt: skip
    assert value["shape"] == PRIMARY_COORDINATORS
    fault.stop(plain)
    assert all(reachable(nodes).values())


def test_an_asymmetric_grudge_drops_one_direction_only(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    n1, n2 = nodes[0], nodes[1]
    grudge = grudges.from_components([n.name for n in nodes], []) | {"n1": frozenset({"n2"})}
    fault = Partition("grudge", grudge)
    fault.start(plain)
    token = f"t{random.getrandbits(32)}"
    probe(n1, "send", "n2", f"{token}-from-n1")
    probe(n2, "send", "n1", f"{token}-from-n2")
    time.sleep(0.5)
    assert f"{token}-from-n1" in n2.exec(f"cat {SEEN}").output  # n2 hears n1
    assert f"{token}-from-n2" not in n1.exec(f"cat {SEEN}").output  # n1 does not hear n2
    fault.stop(plain)
    probe(n2, "send", "n1", f"{token}-after")
    eventually(lambda: f"{token}-after" in n1.exec(f"cat {SEEN}").output, "n1 hearing n2")


# --- packet --------------------------------------------------------------------------------


def apply_packet(plain: PlainCluster, **behaviors: dict[str, float]) -> dict[str, Any]:
    """A packet fault on n1 only; returns its history value."""
    return Packet("one", ["n1"], behaviors).start(plain)


def test_packet_delay_shows_in_the_round_trip_time(plain: PlainCluster, nodes: list[Node]) -> None:
    n1 = nodes[0]
    assert probe(n1, "rtt", "n2", 20)["median"] < 0.02
    value = apply_packet(plain, delay={"ms": 100, "jitter_ms": 0})
    assert value["mechanism"]["n1"]["delay"] in ("netem", "nfqueue")
    assert 0.09 < probe(n1, "rtt", "n2", 20)["median"] < 0.5
    assert probe(nodes[2], "rtt", "n2", 20)["median"] < 0.02  # only n1's traffic
    heal_nodes(nodes)
    assert probe(n1, "rtt", "n2", 20)["median"] < 0.02


def test_packet_loss_shows_in_the_drop_rate(plain: PlainCluster, nodes: list[Node]) -> None:
    n1 = nodes[0]
    assert probe(n1, "burst", "n2", 300)["received"] >= 295
    value = apply_packet(plain, loss={"percent": 50})
    assert value["mechanism"]["n1"]["loss"] in ("netem", "iptables-statistic")
    got = probe(n1, "burst", "n2", 300)
    assert 0.3 < got["received"] / got["sent"] < 0.7, got
    heal_nodes(nodes)
    assert probe(n1, "burst", "n2", 300)["received"] >= 295


def test_packet_duplication_and_reordering(plain: PlainCluster, nodes: list[Node]) -> None:
    n1 = nodes[0]
    clean = probe(n1, "burst", "n2", 200)
    assert clean["received"] == clean["distinct"] and clean["inversions"] == 0
    apply_packet(plain, duplicate={"percent": 50}, reorder={"percent": 50})
    got = probe(n1, "burst", "n2", 200)
    assert got["distinct"] >= 195 and got["received"] > 1.3 * got["distinct"], got
    assert got["inversions"] > 10, got
    heal_nodes(nodes)
    clean = probe(n1, "burst", "n2", 200)
    assert clean["received"] == clean["distinct"] and clean["inversions"] == 0


def test_packet_rate_limits_throughput(plain: PlainCluster, nodes: list[Node]) -> None:
    n1 = nodes[0]
    assert probe(n1, "bulk", "n2", 250_000)["seconds"] < 0.5
    value = apply_packet(plain, rate={"kbit": 1000})
    assert value["mechanism"]["n1"]["rate"] in ("netem", "tbf")
    assert probe(n1, "bulk", "n2", 250_000)["seconds"] > 1.5  # 2 Mbit at 1 Mbit/s
    heal_nodes(nodes)
    assert probe(n1, "bulk", "n2", 250_000)["seconds"] < 0.5


def test_packet_fault_on_a_kernel_without_netem_falls_back(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    """What this machine's kernel gets: every behaviour at once, by its fallback mechanism."""
    n1 = nodes[0]
    if n1.exec("tc qdisc add dev lo root netem delay 1ms", check=False).code == 0:
        n1.exec("tc qdisc del dev lo root")
        pytest.skip("this kernel has netem")
    value = Packet("one", ["n1"], {b: dict(a) for b, a in packet.BEHAVIORS.items()}).start(plain)
    assert value["mechanism"]["n1"] == {
        "delay": "nfqueue",
        "duplicate": "nfqueue",
        "reorder": "nfqueue",
        "loss": "iptables-statistic",
        "rate": "tbf",
    }
    assert probe(n1, "rtt", "n2", 20)["replies"] > 0  # slowed and lossy, not cut off


# --- clock ---------------------------------------------------------------------------------


def faked_offset(node: Node) -> float:
    """The node's faked clock minus the real one, seen by a process started under faketime;
    asked again when Docker's exec hands back no output, as `Node.read` does (each try timed
    on its own)."""
    for _ in range(READ_TRIES):
        before = time.time()
        if said := node.exec(under_faketime("date +%s.%N")).output.strip():
            return float(said) - (before + time.time()) / 2
    raise AssertionError(f"date printed nothing on {node.name}, {READ_TRIES} times")


def test_clock_bump_moves_the_faked_clock_and_reset_restores_it(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    n1, n2 = nodes[0], nodes[1]
    assert abs(faked_offset(n1)) < 1
    for delta_ms in (60_000, -4_500):
        fault = Clock("bump", "one", ["n1"], delta_ms)
        assert fault.start(plain)["mechanism"] == "libfaketime"
        assert abs(faked_offset(n1) - delta_ms / 1000) < 1
        assert abs(faked_offset(n2)) < 1  # only the target
        assert abs(float(n1.exec("date +%s").output) - time.time()) < 2  # the real clock
        fault.stop(plain)
        assert abs(faked_offset(n1)) < 1


def test_clock_strobe_flips_between_the_offset_and_zero(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    n1 = nodes[0]
    fault = Clock("strobe", "one", ["n1"], 30_000, 100)
    fault.start(plain)
    seen = set()
    for _ in range(20):  # 70 ms apart: each sample lands at another phase of the 200 ms cycle
        seen.add(round(faked_offset(n1) / 30))  # 0 or 1, in units of 30 s
        time.sleep(0.07)
    assert seen == {0, 1}
    fault.stop(plain)
    assert all(abs(faked_offset(n1)) < 1 for _ in range(5))


def test_clock_bump_reaches_a_running_postgres(db: SingleCluster) -> None:
    """A server started before the bump sees it: libfaketime rereads the file on every call."""
    ep = db.endpoints()[0]

    def db_offset() -> float:
        with psycopg.connect(
            host=ep.host, port=ep.port, dbname=ep.dbname, user=ep.user, connect_timeout=5
        ) as conn:
            before = time.time()
            (now,) = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
            return float(now) - (before + time.time()) / 2

    assert abs(db_offset()) < 1
    fault = Clock("bump", "all", ["n1"], -120_000)
    fault.start(db)
    assert abs(db_offset() + 120) < 1
    fault.stop(db)
    assert abs(db_offset()) < 1


# --- pause and kill ------------------------------------------------------------------------


def postgres_states(node: Node) -> dict[int, str]:
    procs = process_table(node)
    pids = set(tree(procs, f"{pg.PG_BIN}/postgres"))
    return {p.pid: p.state for p in procs if p.pid in pids}


def connects(ep: Endpoint, timeout: int = 2) -> bool:
    try:
        with psycopg.connect(
            host=ep.host, port=ep.port, dbname=ep.dbname, user=ep.user, connect_timeout=timeout
        ) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def test_pause_stops_postgres_and_a_client_times_out(db: SingleCluster) -> None:
    node, ep = db.nodes[0], db.endpoints()[0]
    assert connects(ep)
    fault = Pause("all", ["n1"])
    value = fault.start(db)
    states = postgres_states(node)
    assert len(states) > 1 and all(s.startswith("T") for s in states.values()), states
    # every process left is stopped and was named; a backend that exited between the fault's
    # look and its signal (a client's connection closing) is named but gone
    paused = set(value["paused"]["n1"]["postgres"])
    postmaster = int(node.exec(f"head -1 {pg.PGDATA}/postmaster.pid").output.split()[0])
    assert set(states) <= paused and postmaster in set(states)
    started = time.monotonic()
    assert not connects(ep, timeout=2)
    assert time.monotonic() - started >= 1.5  # a timeout, not a refusal
    fault.stop(db)
    assert not any(s.startswith("T") for s in postgres_states(node).values())
    assert connects(ep)


def test_kill_removes_postgres_and_stop_restarts_it(db: SingleCluster) -> None:
    node, ep = db.nodes[0], db.endpoints()[0]
    before = set(postgres_states(node))
    postmaster = int(node.exec(f"head -1 {pg.PGDATA}/postmaster.pid").output.split()[0])
    fault = Kill("primaries", None)
    value = fault.start(db)
    assert value["targets"] == ["n1"]
    # the postmaster and its own processes; a backend may come or go between the look and
    # the kill (a client's connection closing), so the sets need not be equal
    killed = set(value["killed"]["n1"]["postgres"])
    assert postmaster in killed and postmaster in before
    assert postgres_states(node) == {}
    assert not connects(ep)
    assert fault.stop(db)["restarted"] == {"n1": ["postgres"]}
    after = postgres_states(node)
    assert after and not set(after) & before
    assert connects(ep)


FORKER_PATH = "/opt/harness-test/forker.py"
FORKER = b"""
import os, signal, time
alive = []
while True:  # a postmaster's shape: a new child every few ms, each under its own name
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "31.4159"])
    alive.append(pid)
    if len(alive) > 40:  # as backends end: a few dozen at a time
        os.kill(alive.pop(0), signal.SIGKILL)
    while os.waitpid(-1, os.WNOHANG)[0]:
        pass
    time.sleep(0.003)
"""


def test_kill_leaves_no_child_of_a_parent_that_forks_all_the_time(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    """Killed parents first, children forked between the look and the kill were left to init
    and lived on (Postgres's backends did, and their shared memory kept a new postmaster from
    starting); frozen first, the whole tree goes."""
    node = nodes[0]
    node.put_file(FORKER_PATH, FORKER)
    node.exec(f"python3 {FORKER_PATH} >/dev/null 2>&1", detach=True)
    children = "sleep 31.4159"
    eventually(lambda: len(tree(process_table(node), children)) > 20, "children forked")
    killed = kill_tree(node, re.escape(FORKER_PATH))
    wait_gone(node, killed)
    assert len(killed) > 20
    left = [p for p in process_table(node) if children in p.args and not p.state.startswith("Z")]
    assert left == [], f"{len(left)} children escaped the kill"


# --- composite -------------------------------------------------------------------------------


def echo_running(node: Node) -> bool:
    return bool(tree(process_table(node), re.escape(ECHO_PATH)))


def test_a_kill_inside_a_partition_leaves_the_partition_and_restarts_behind_it(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    """`composite`'s two faults act on each other's nodes: the kill and its restart neither lift
    the partition nor escape it, and the partition's heal comes after the restart."""
    names = [n.name for n in nodes]
    plain.leader_name = "n2"
    outer = Partition.planned("primaries", names, random.Random(3))
    grudge = {n: frozenset(v) for n, v in outer.start(plain)["grudge"].items()}
    assert grudge["n2"] == frozenset(names) - {"n2"}  # the leader alone
    inner = Kill("primaries", None)
    assert inner.start(plain)["targets"] == ["n2"]
    assert not echo_running(nodes[1])
    assert reachable(nodes) == expected(grudge)
    inner.stop(plain)
    eventually(lambda: echo_running(nodes[1]), "the killed echo server restarted")
    assert reachable(nodes) == expected(grudge)  # restarted, and still cut off
    outer.stop(plain)
    assert all(reachable(nodes).values())


# --- heal_nodes ----------------------------------------------------------------------------


def traces(node: Node) -> list[str]:
    """Whatever a fault could have left on the node."""
    found = []
    if "HARNESS-" in node.exec("iptables-save").output:
        found.append("iptables chain")
    if any(p.state.startswith("T") for p in process_table(node)):
        found.append("stopped process")
    if (set_to := offset_set(node)) not in ("", "+0"):
        found.append(f"clock offset {set_to}")
    live = {str(p.pid) for p in process_table(node)}
    shm = node.exec("ls /dev/shm | grep faketime || true").output.split()
    if [f for f in shm if f.rsplit("_", 1)[-1] not in live]:
        found.append("faketime shared memory of a dead process")
    if packet.HANDLE in node.read("tc qdisc show"):
        found.append("qdisc")
    procs = process_table(node)
    if tree(procs, re.escape(packet.DELAYER_PATH)) or tree(procs, "clock-strobe"):
        found.append("nemesis helper process")
    return found


def test_heal_nodes_removes_every_trace_and_is_idempotent(
    plain: PlainCluster, nodes: list[Node]
) -> None:
    everything = {b: dict(a) for b, a in packet.BEHAVIORS.items()}
    names = [n.name for n in nodes]
    Partition.planned("majority", names, random.Random(1)).start(plain)
    Packet("all", names, everything).start(plain)
    Clock("strobe", "all", names, 1000, 100).start(plain)
    Pause("all", names).start(plain)
    # A process killed under faketime leaves its shared memory behind.
    nodes[0].exec(under_faketime("tail -f /dev/null") + " >/dev/null 2>&1", detach=True)
    tail = eventually(lambda: tree(process_table(nodes[0]), "^tail -f /dev/null"), "tail")
    eventually(lambda: str(tail[0]) in nodes[0].exec("ls /dev/shm").output, "its shm")
    send(nodes[0], tail, "KILL")
    assert all(traces(n) for n in nodes)
    healed = heal_nodes(nodes)
    assert not [line for line in healed if "could not" in line], healed
    assert {n.name: traces(n) for n in nodes} == {n: [] for n in names}
    assert heal_nodes(nodes) == []
    assert all(reachable(nodes).values())


# --- the schedule, end to end --------------------------------------------------------------


def started_kinds(path: Path) -> set[str]:
    """The kinds of fault whose start the history holds so far."""
    lines = path.read_text().splitlines() if path.exists() else []
    events = [json.loads(line) for line in lines if line.endswith("}")]
    return {e["value"]["fault"] for e in events if e["f"].startswith("start-")}


def test_a_schedule_of_kill_pause_clock_on_single_records_windows_and_heals(
    db: SingleCluster, tmp_path: Path
) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        nemesis = build(["kill", "pause", "clock"], db, history, seed=3, interval=0.5)
        stop = threading.Event()
        thread = threading.Thread(target=nemesis.run, args=(stop,))
        thread.start()
        # until two kinds of fault have come (a kill's restart may take seconds on a loaded
        # machine, so a fixed wait sometimes saw one)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(started_kinds(path)) < 2:
            time.sleep(0.5)
        stop.set()
        thread.join(timeout=60)
        nemesis.heal()
        heal_nodes(db.nodes)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert events and all(e["process"] == "nemesis" for e in events)
    assert [e["type"] for e in events] == ["invoke", "info"] * (len(events) // 2)
    assert not [e for e in events if "error" in e]
    kinds = {e["value"]["fault"] for e in events}
    assert kinds <= {"kill", "pause", "clock"} and len(kinds) >= 2
    starts = [e for e in events if e["f"].startswith("start-")]
    stops = [e for e in events if e["f"].startswith("stop-")]
    assert len(starts) == len(stops)  # every window closed
    assert traces(db.nodes[0]) == []
    assert connects(db.endpoints()[0])
