"""The local backend on this machine: every test looks at an effect on real namespaces."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from rich.console import Console

from clusters.backend import Node, NodeCommandError, shell_quote
from clusters.local_backend import CLUSTERS_DIR, NETNS_DIR, PREFIX, RUN_DIR, LocalBackend
from clusters.registry import make_backend
from clusters.single import SingleCluster
from harness.errors import BadInput, InfraError

pytestmark = pytest.mark.local

T = TypeVar("T")
Trio = tuple[str, list[Node]]  # the module cluster's name and its nodes
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> LocalBackend:
    """The backend, with the node rootfs made (about a minute the first time)."""
    try:
        local = LocalBackend(console=Console(stderr=True))
    except BadInput as exc:
        pytest.skip(str(exc))
    capture = request.config.pluginmanager.getplugin("capturemanager")
    # Out of pytest's capture, so whoever waits sees why and how far debootstrap is.
    with capture.global_and_fixture_disabled():
        local.rootfs()
    return local


@pytest.fixture
def fresh_name(backend: LocalBackend) -> Iterator[str]:
    """A cluster name no one else uses; whatever a test made under it is taken down."""
    name = f"t{secrets.token_hex(4)}"
    yield name
    backend.down(name)


@pytest.fixture(scope="module")
def trio(backend: LocalBackend) -> Iterator[Trio]:
    """The module's 3-node cluster, always taken down: the tests that only look share it."""
    name = f"t{secrets.token_hex(4)}"
    try:
        yield name, backend.up(name, 3, [])
    finally:
        backend.down(name)


def eventually(probe: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    """The first truthy result of `probe`: node processes start and stop asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = probe()
        except (OSError, NodeCommandError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def serve(node: Node, port: int, reply: str) -> None:
    """A TCP server on the node that sends `reply` to every connection and closes it."""
    server = (
        f"import socket; s = socket.create_server(('', {port})); "
        f"[c.sendall(b'{reply}\\n') or c.close() for c, _ in iter(s.accept, None)]"
    )
    node.exec(f"python3 -c {shell_quote(server)}", detach=True)
    eventually(lambda: node.exec(f"nc -z 127.0.0.1 {port}").code == 0, f"port {port}")


def fetch(node: Node, host: str, port: int) -> str:
    """What a client on `node` reads from host:port, or "" when it cannot connect in 2 s."""
    return node.exec(f"nc -w 2 {host} {port} </dev/null", check=False).output.strip()


def state_of(pid: int) -> str:
    """The one-letter state of a host pid, "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def processes_of(cluster: str) -> set[int]:
    """Host pids of the cluster's init launchers and of every process in their nodes."""
    marker = f"{CLUSTERS_DIR / cluster}/".encode()
    launchers = []
    by_pidns: dict[str, list[int]] = {}
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            by_pidns.setdefault(os.readlink(proc / "ns/pid"), []).append(int(proc.name))
        except (OSError, ValueError):
            continue
        if marker in cmdline:
            launchers.append(int(proc.name))
    found = set(launchers)
    for launcher in launchers:
        for init in Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split():
            found.update(by_pidns[os.readlink(f"/proc/{init}/ns/pid")])
    return found


def leftovers(cluster: str) -> list[str]:
    """Everything of `cluster` that still exists on this machine, by name."""
    paths = (NETNS_DIR / f"{PREFIX}:{cluster}", CLUSTERS_DIR / cluster, RUN_DIR / cluster)
    left = [str(p) for p in paths if p.exists()]
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True).stdout)
    left += [link["ifname"] for link in links if link.get("ifalias") == f"{PREFIX}:{cluster}"]
    # Mounts in every mount namespace of the machine, not only ours.
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            if f"{CLUSTERS_DIR / cluster}/" in mountinfo.read_text():
                left.append(f"a mount in {mountinfo}")
        except OSError:
            continue
    return left


def test_registry_makes_it() -> None:
    try:
        assert make_backend("local").name == "local"
    except BadInput as exc:
        pytest.skip(str(exc))


def test_nodes_are_listed_in_order(backend: LocalBackend, trio: Trio) -> None:
    name, nodes = trio
    assert [n.name for n in nodes] == ["n1", "n2", "n3"]
    assert [n.name for n in backend.nodes(name)] == ["n1", "n2", "n3"]
    assert name in backend.clusters()
    assert [n.exec("hostname").output.strip() for n in nodes] == ["n1", "n2", "n3"]
    # Its own processes: the init is PID 1 and nothing of the host or other nodes is visible.
    assert nodes[1].exec("ps -e -o comm=").output.split()[:2] == ["tini", "sleep"]


def test_up_refuses_a_taken_or_bad_name_and_leaves_the_cluster_be(
    backend: LocalBackend, trio: Trio
) -> None:
    name, nodes = trio
    with pytest.raises(InfraError, match="already up"):
        backend.up(name, 1, [])
    with pytest.raises(BadInput):
        backend.up("../etc", 1, [])
    assert backend.down("../etc") == []
    assert nodes[0].exec("hostname").output.strip() == "n1"


def test_exec_reports_output_and_exit_code(trio: Trio, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_ONLY", "the harness's")
    n1 = trio[1][0]
    result = n1.exec("echo out; echo err >&2; echo $GREETING", env={"GREETING": "hello"})
    assert result.code == 0
    assert sorted(result.output.split()) == ["err", "hello", "out"]
    assert n1.exec("exit 3", check=False).code == 3
    with pytest.raises(NodeCommandError) as failed:
        n1.exec("echo boom; exit 4")
    assert failed.value.result.code == 4
    assert "boom" in str(failed.value)
    as_pg = n1.exec("id -un; id -Gn; echo $HOME; echo $HARNESS_ONLY", user="postgres").output
    assert as_pg.split("\n")[:4] == ["postgres", "postgres ssl-cert", "/var/lib/postgresql", ""]
    assert n1.exec("true", user="nosuchuser", check=False).code == 126


def test_put_file_and_get_round_trip(trio: Trio, tmp_path: Path) -> None:
    n1 = trio[1][0]
    data = bytes(range(256)) * 100
    n1.put_file("/srv/round/trip/data.bin", data, mode=0o640, owner="postgres")
    stat = n1.exec("stat -c '%a %U %G' /srv/round/trip/data.bin").output.split()
    assert stat == ["640", "postgres", "postgres"]

    assert n1.get("/srv/round/trip/data.bin", tmp_path / "file")
    copy = tmp_path / "file" / "data.bin"
    assert copy.read_bytes() == data
    assert copy.stat().st_mode & 0o777 == 0o640

    assert n1.get("/srv/round/", tmp_path / "dir")
    assert (tmp_path / "dir" / "round" / "trip" / "data.bin").read_bytes() == data
    assert not n1.get("/srv/no/such/file", tmp_path / "missing")

    # /var/run is the absolute link /run: followed on the node, never on the host.
    marker = f"harness-local-test-{secrets.token_hex(4)}"
    n1.put_file(f"/var/run/{marker}", b"node")
    assert n1.exec(f"cat /run/{marker}").output == "node"
    assert not Path(f"/run/{marker}").exists()
    assert trio[1][1].exec(f"test -e /run/{marker}", check=False).code == 1


def test_logs_show_what_the_init_printed(trio: Trio) -> None:
    n2, n3 = trio[1][1:]
    n2.exec("echo marker-from-pid-1 > /proc/1/fd/1")
    assert "marker-from-pid-1" in n2.logs()
    assert "marker-from-pid-1" not in n3.logs()


def test_signal_stops_continues_and_kills_without_zombie(trio: Trio) -> None:
    n1 = trio[1][0]

    def state(pid: int) -> str:
        stat = n1.exec(f"cat /proc/{pid}/stat 2>/dev/null", check=False).output
        return stat.rpartition(")")[2].split()[0] if stat else ""

    # Backgrounded so its launcher exits at once: the sleep is orphaned to PID 1 (tini),
    # which must reap it, as it must reap every daemon a cluster kind starts.
    n1.exec("sleep 1000 >/dev/null 2>&1 &", detach=True)
    pid = int(eventually(lambda: n1.exec("pgrep -f '^sleep 1000$'").output, "the sleep"))
    assert n1.exec(f"ps -o ppid= -p {pid}").output.strip() == "1"

    assert n1.signal("sleep 1000", "STOP") == [pid]
    eventually(lambda: state(pid) == "T", "state T")
    assert n1.signal("sleep 1000", "CONT") == [pid]
    eventually(lambda: state(pid) == "S", "state S")
    assert n1.signal("sleep 1000", "KILL") == [pid]
    eventually(lambda: state(pid) == "", f"pid {pid} to vanish (a zombie has state Z)")
    assert n1.signal("sleep 1000", "KILL") == []


def test_nodes_reach_each_other_by_hostname(trio: Trio) -> None:
    n1, n2, n3 = trio[1]
    serve(n1, 7001, "from-n1")
    serve(n3, 7003, "from-n3")
    assert fetch(n2, "n1", 7001) == "from-n1"
    assert fetch(n1, "n3", 7003) == "from-n3"


def test_host_reaches_a_node_port_through_endpoint(trio: Trio) -> None:
    n2 = trio[1][1]
    serve(n2, 7002, "from-n2")
    host, port = n2.endpoint(7002)
    with socket.create_connection((host, port), timeout=5) as conn:
        assert conn.recv(100) == b"from-n2\n"


def test_iptables_in_a_node_blocks_one_peer_only(trio: Trio) -> None:
    n1, n2, n3 = trio[1]
    serve(n1, 7004, "from-n1")
    n2_address = n2.endpoint(0)[0]
    n1.exec(f"iptables -A INPUT -s {n2_address} -j DROP")
    try:
        assert fetch(n2, "n1", 7004) == ""
        assert fetch(n3, "n1", 7004) == "from-n1"
    finally:
        n1.exec("iptables -F INPUT")
    assert fetch(n2, "n1", 7004) == "from-n1"


def test_tc_works_in_a_node(trio: Trio) -> None:
    n3 = trio[1][2]
    n3.exec("tc qdisc add dev eth0 root tbf rate 1mbit burst 32kbit latency 400ms")
    try:
        assert "tbf" in n3.exec("tc qdisc show dev eth0").output
    finally:
        n3.exec("tc qdisc del dev eth0 root")


def test_the_single_cluster_kind_runs_on_it(backend: LocalBackend, fresh_name: str) -> None:
    kind = SingleCluster(backend, fresh_name, {})
    kind.deploy(lambda msg: None)
    (ep,) = kind.endpoints()
    with psycopg.connect(
        host=ep.host, port=ep.port, dbname=ep.dbname, user=ep.user, connect_timeout=5
    ) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert kind.status()["nodes"]["n1"]["postgres"] == "up"


def test_down_removes_everything_of_the_cluster_only(
    backend: LocalBackend, fresh_name: str
) -> None:
    # A neighbour whose name starts with the name taken down must survive it.
    neighbour = f"{fresh_name}x"
    try:
        (survivor,) = backend.up(neighbour, 1, [])
        nodes = backend.up(fresh_name, 2, [])
        nodes[0].exec("sleep 1000", detach=True)
        eventually(lambda: nodes[0].exec("pgrep -f '^sleep 1000$'").output, "the sleep")
        processes = processes_of(fresh_name)
        # Two launchers, two inits, their sleeps, the sleep 1000 (and its sh).
        assert len(processes) >= 7
        assert len(leftovers(fresh_name)) >= 4

        removed = backend.down(fresh_name)
        assert len(removed) == 6, removed  # two nodes, veth, netns, two directories
        assert leftovers(fresh_name) == []
        # This process started the launchers and reaped them: no zombie either.
        assert {pid: state_of(pid) for pid in processes if state_of(pid)} == {}
        assert fresh_name not in backend.clusters()
        assert backend.nodes(fresh_name) == []
        assert backend.down(fresh_name) == []

        assert survivor.exec("hostname").output.strip() == "n1"
        assert neighbour in backend.clusters()
    finally:
        backend.down(neighbour)
    assert leftovers(neighbour) == []


CREATOR = """
import sys, time
from clusters.local_backend import LocalBackend
LocalBackend().up(sys.argv[1], 2, [])
print("up", flush=True)
time.sleep(1000)
"""


def test_down_finds_a_cluster_after_its_creator_was_killed(
    backend: LocalBackend, fresh_name: str
) -> None:
    creator = subprocess.Popen(
        [sys.executable, "-c", CREATOR, fresh_name], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert creator.stdout is not None and creator.stdout.readline() == "up\n"
    finally:
        creator.kill()
        creator.wait()

    fresh = LocalBackend()
    assert fresh_name in fresh.clusters()
    n1, n2 = fresh.nodes(fresh_name)
    # The nodes outlived their creator, as `harness cluster up` needs.
    serve(n1, 7005, "still-here")
    assert fetch(n2, "n1", 7005) == "still-here"
    processes = processes_of(fresh_name)

    assert len(fresh.down(fresh_name)) == 6
    assert leftovers(fresh_name) == []
    # The launchers were the dead creator's children: the host's PID 1 reaps them, maybe lazily.
    assert {pid: s for pid in processes if (s := state_of(pid)) not in ("", "Z")} == {}
    assert fresh_name not in fresh.clusters()
