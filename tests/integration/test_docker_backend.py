"""The Docker backend against a real engine: every test looks at an effect on real containers."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from clusters.backend import Node, NodeCommandError
from clusters.docker_backend import CLUSTER_LABEL, DockerBackend
from harness.errors import BadInput, InfraError

pytestmark = pytest.mark.docker

HTTP_PORT = 8000
T = TypeVar("T")
Pair = tuple[str, list[Node]]  # the module cluster's name and its nodes


@pytest.fixture(scope="module")
def pair(docker_backend: DockerBackend, module_cluster_name: str) -> Pair:
    """The module's 2-node cluster, publishing HTTP_PORT; module_cluster_name takes it down."""
    return module_cluster_name, docker_backend.up(module_cluster_name, 2, [HTTP_PORT])


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


def labelled(backend: DockerBackend, cluster: str) -> list[str]:
    """Names of every container and network the engine still has with the cluster's label."""
    label = {"label": f"{CLUSTER_LABEL}={cluster}"}
    return [c.name for c in backend.client.containers.list(all=True, filters=label)] + [
        n.name for n in backend.client.networks.list(filters=label)
    ]


def test_nodes_are_listed_in_order(docker_backend: DockerBackend, pair: Pair) -> None:
    name, nodes = pair
    assert [n.name for n in nodes] == ["n1", "n2"]
    assert [n.name for n in docker_backend.nodes(name)] == ["n1", "n2"]
    assert name in docker_backend.clusters()
    assert nodes[1].exec("hostname").output.strip() == "n2"


def test_exec_reports_output_and_exit_code(pair: Pair) -> None:
    n1 = pair[1][0]
    result = n1.exec("echo out; echo err >&2; echo $GREETING", env={"GREETING": "hello"})
    assert result.code == 0
    # Both streams arrive, though not necessarily in the order they were written.
    assert sorted(result.output.split()) == ["err", "hello", "out"]
    assert n1.exec("exit 3", check=False).code == 3
    with pytest.raises(NodeCommandError) as failed:
        n1.exec("echo boom; exit 4")
    assert failed.value.result.code == 4
    assert "boom" in str(failed.value)
    assert n1.exec("id -un", user="postgres").output.strip() == "postgres"


def test_put_file_and_get_round_trip(pair: Pair, tmp_path: Path) -> None:
    n1 = pair[1][0]
    data = bytes(range(256)) * 100
    n1.put_file("/srv/round/trip/data.bin", data, mode=0o640, owner="postgres")
    stat = n1.exec("stat -c '%a %U %G' /srv/round/trip/data.bin").output.split()
    assert stat == ["640", "postgres", "postgres"]

    assert n1.get("/srv/round/trip/data.bin", tmp_path / "file")
    copy = tmp_path / "file" / "data.bin"
    assert copy.read_bytes() == data
    assert copy.stat().st_mode & 0o777 == 0o640

    assert n1.get("/srv/round", tmp_path / "dir")
    assert (tmp_path / "dir" / "round" / "trip" / "data.bin").read_bytes() == data

    assert not n1.get("/srv/no/such/file", tmp_path / "missing")


def test_logs_show_what_the_main_process_printed(pair: Pair) -> None:
    n2 = pair[1][1]
    n2.exec("echo marker-from-pid-1 > /proc/1/fd/1")
    assert "marker-from-pid-1" in n2.logs()


def state_of(node: Node, pid: int) -> str:
    """The one-letter state from /proc/<pid>/stat, or "" once the process is gone."""
    stat = node.exec(f"cat /proc/{pid}/stat 2>/dev/null", check=False).output
    return stat.rpartition(")")[2].split()[0] if stat else ""


def test_signal_stops_continues_and_kills_without_zombie(pair: Pair) -> None:
    n1 = pair[1][0]
    # Backgrounded so its launcher exits at once: the sleep is orphaned to PID 1 (tini),
    # which must reap it, as it must reap every daemon a cluster kind starts.
    n1.exec("sleep 1000 >/dev/null 2>&1 &", detach=True)
    pid = int(eventually(lambda: n1.exec("pgrep -f '^sleep 1000$'").output, "the sleep"))
    assert n1.exec(f"ps -o ppid= -p {pid}").output.strip() == "1"

    assert n1.signal("sleep 1000", "STOP") == [pid]
    eventually(lambda: state_of(n1, pid) == "T", "state T")
    assert n1.signal("sleep 1000", "CONT") == [pid]
    eventually(lambda: state_of(n1, pid) == "S", "state S")
    assert n1.signal("sleep 1000", "KILL") == [pid]
    eventually(lambda: state_of(n1, pid) == "", f"pid {pid} to vanish (a zombie has state Z)")
    assert n1.signal("sleep 1000", "KILL") == []


def test_nodes_reach_each_other_by_hostname(pair: Pair) -> None:
    n1, n2 = pair[1]
    n2.exec("nc -l 7000 > /tmp/received", detach=True)
    send = "import socket; socket.create_connection(('n2', 7000), 2).sendall(b'hello from n1')"
    eventually(lambda: n1.exec(f'python3 -c "{send}"').code == 0, "n2:7000 to accept")
    received = eventually(lambda: n2.exec("cat /tmp/received").output, "the bytes on n2")
    assert received == "hello from n1"


def test_published_port_reaches_the_node(pair: Pair) -> None:
    n1, n2 = pair[1]
    n1.put_file("/srv/www/hello.txt", b"served by n1\n")
    n1.exec(f"python3 -m http.server {HTTP_PORT} -d /srv/www >/dev/null 2>&1", detach=True)
    host, port = n1.endpoint(HTTP_PORT)
    assert host == "127.0.0.1"
    assert port != n2.endpoint(HTTP_PORT)[1]

    def fetch() -> bytes:
        with urllib.request.urlopen(f"http://{host}:{port}/hello.txt", timeout=2) as reply:
            return reply.read()

    assert eventually(fetch, "the HTTP server") == b"served by n1\n"
    with pytest.raises(InfraError, match="not published"):
        n1.endpoint(9)


def test_down_removes_every_container_and_network(
    docker_backend: DockerBackend, cluster_name: str
) -> None:
    docker_backend.up(cluster_name, 1, [])
    assert sorted(labelled(docker_backend, cluster_name)) == [
        f"harness-{cluster_name}",
        f"harness-{cluster_name}-n1",
    ]
    removed = docker_backend.down(cluster_name)
    assert sorted(removed) == [f"harness-{cluster_name}", f"harness-{cluster_name}-n1"]
    assert labelled(docker_backend, cluster_name) == []
    assert cluster_name not in docker_backend.clusters()
    assert docker_backend.nodes(cluster_name) == []
    assert docker_backend.down(cluster_name) == []


def test_up_failing_half_way_leaves_nothing(
    docker_backend: DockerBackend, cluster_name: str
) -> None:
    # A container without our labels already holds n2's name, so creating n2 fails after
    # the network and n1 exist.
    blocker = docker_backend.client.containers.create(
        docker_backend.image(), name=f"harness-{cluster_name}-n2"
    )
    try:
        with pytest.raises(InfraError, match="Conflict"):
            docker_backend.up(cluster_name, 3, [])
        assert labelled(docker_backend, cluster_name) == []
    finally:
        blocker.remove(force=True)


def test_unreachable_engine_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="cannot reach the Docker engine"):
        DockerBackend(base_url=f"unix://{tmp_path}/no-engine.sock")
