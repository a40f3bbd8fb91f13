"""The local backend on this machine: every test looks at an effect on real namespaces.

What every backend's nodes do is tested by `TestLocalNode` (node_contract.py); the rest here is
the local backend's own."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from rich.console import Console

from clusters.backend import Node
from clusters.kinds.single import SingleCluster
from clusters.local_backend import CLUSTERS_DIR, NETNS_DIR, PREFIX, RUN_DIR, LocalBackend
from clusters.registry import make_backend
from core.errors import BadInput
from tests.integration.node_contract import (
    ContractCluster,
    InitNodeContract,
    eventually,
    fetch,
    serve,
)

pytestmark = pytest.mark.local

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


@pytest.fixture(scope="module")
def contract_cluster(backend: LocalBackend, trio: Trio) -> ContractCluster:
    name, nodes = trio
    # Every port of a node is reachable at its address: any will do.
    return ContractCluster(backend, name, 3, nodes, 7000, witnesses=nodes)


class TestLocalNode(InitNodeContract):
    unknown_user_code = 126  # as Docker's


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


def test_each_node_has_its_own_hostname_and_processes(trio: Trio) -> None:
    nodes = trio[1]
    assert [n.exec("hostname").output.strip() for n in nodes] == ["n1", "n2", "n3"]
    # Its own processes: the init is PID 1 and nothing of the host or other nodes is visible.
    assert nodes[1].exec("ps -e -o comm=").output.split()[:2] == ["tini", "sleep"]


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
