"""What every backend's nodes do alike (the `Node` interface), written once.

A backend's test module subclasses `NodeContract` (or `InitNodeContract`) as a `Test…` class and
supplies the fixture `contract_cluster`: a `ContractCluster` of 2 or 3 nodes that is up. The bases
are not named Test…, so pytest collects these tests once per backend and never on their own.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from clusters.backend import Backend, Node, NodeCommandError, shell_quote
from core.errors import BadInput, InfraError

T = TypeVar("T")


@dataclass(frozen=True)
class ContractCluster:
    """A cluster that is up, as the contract tests see it."""

    backend: Backend
    name: str
    count: int  # how many nodes `up` was asked for
    nodes: list[Node]  # what `up` returned
    port: int  # a node port `up` was asked to expose: the control machine reaches it by endpoint
    # A way into each node past the backend under test, where there is one (the ssh hosts are
    # containers); else the nodes themselves. Effects are looked at through these.
    witnesses: list[Node]


def eventually(probe: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    """The first truthy result of `probe`: node processes start and stop asynchronously."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = probe()
        except (OSError, NodeCommandError, InfraError) as exc:
            result, last = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}" + (f": {last}" if last else ""))
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


def state_of(node: Node, pid: int) -> str:
    """The one-letter state from /proc/<pid>/stat, or "" once the process is gone."""
    stat = node.exec(f"cat /proc/{pid}/stat 2>/dev/null", check=False).output
    return stat.rpartition(")")[2].split()[0] if stat else ""


class NodeContract:
    """The tests of the node interface; a subclass says what its backend does differently."""

    # The code of a command run as a user the node does not have (Docker's is 126).
    unknown_user_code: int
    # Users whose commands the backend still wraps in a process that holds the command line,
    # against Node.exec's contract: the test of it is an expected failure for them.
    wrapped_users: tuple[str, ...] = ()

    def test_nodes_are_listed_in_order(self, contract_cluster: ContractCluster) -> None:
        c = contract_cluster
        names = [f"n{i}" for i in range(1, c.count + 1)]
        assert [n.name for n in c.nodes] == names
        assert [n.name for n in c.backend.nodes(c.name)] == names
        assert c.name in c.backend.clusters()

    def test_up_refuses_a_taken_or_bad_name_and_leaves_the_cluster_be(
        self, contract_cluster: ContractCluster
    ) -> None:
        c = contract_cluster
        with pytest.raises(InfraError, match="already up"):
            c.backend.up(c.name, 1, [])
        with pytest.raises(BadInput):
            c.backend.up("../etc", 1, [])
        assert c.backend.down("../etc") == []
        assert [n.name for n in c.backend.nodes(c.name)] == [n.name for n in c.nodes]
        assert c.nodes[0].exec("echo alive").output == "alive\n"

    def test_exec_reports_output_codes_env_and_user(
        self, contract_cluster: ContractCluster, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("HARNESS_ONLY", "the harness's")
        n1 = contract_cluster.nodes[0]
        result = n1.exec("echo out; echo err >&2; echo $GREETING", env={"GREETING": "hello 'you'"})
        assert result.code == 0
        # Both streams arrive, though not necessarily in the order they were written.
        assert sorted(result.output.splitlines()) == ["err", "hello 'you'", "out"]
        assert n1.exec("exit 3", check=False).code == 3
        with pytest.raises(NodeCommandError) as failed:
            n1.exec("echo boom; exit 4")
        assert failed.value.result.code == 4
        assert "boom" in str(failed.value)
        assert n1.exec("id -un").output.strip() == "root"
        # The user's groups and home, the env given, and nothing of the harness's environment.
        as_pg = n1.exec(
            "id -un; id -Gn; echo $HOME; echo $X; echo $HARNESS_ONLY",
            user="postgres",
            env={"X": "y"},
        ).output
        assert as_pg.split("\n")[:5] == [
            "postgres",
            "postgres ssl-cert",
            "/var/lib/postgresql",
            "y",
            "",
        ]
        assert n1.exec("true", user="nosuchuser", check=False).code == self.unknown_user_code

    def test_put_file_and_get_round_trip(
        self, contract_cluster: ContractCluster, tmp_path: Path
    ) -> None:
        n1, w1, w2 = contract_cluster.nodes[0], *contract_cluster.witnesses[:2]
        data = bytes(range(256)) * 100
        n1.put_file("/srv/round/trip/data.bin", data, mode=0o640, owner="postgres")
        n1.put_file("/srv/round/top.txt", b"top\n", mode=0o600)
        stat = w1.exec("stat -c '%a %U %G' /srv/round/trip/data.bin").output.split()
        assert stat == ["640", "postgres", "postgres"]

        assert n1.get("/srv/round/trip/data.bin", tmp_path / "file")
        copy = tmp_path / "file" / "data.bin"
        assert copy.read_bytes() == data
        assert copy.stat().st_mode & 0o777 == 0o640

        assert n1.get("/srv/round", tmp_path / "dir")
        assert (tmp_path / "dir" / "round" / "trip" / "data.bin").read_bytes() == data
        assert (tmp_path / "dir" / "round" / "top.txt").read_text() == "top\n"
        assert n1.get("/srv/round/", tmp_path / "slash")
        assert (tmp_path / "slash" / "round" / "trip" / "data.bin").read_bytes() == data
        assert n1.get("/srv/no/such/file", tmp_path / "missing") is False

        # /var/run is the absolute link /run: followed on the node, never on the control machine.
        marker = f"harness-test-{secrets.token_hex(4)}"
        n1.put_file(f"/var/run/{marker}", b"node")
        assert w1.exec(f"cat /run/{marker}").output == "node"
        assert not Path(f"/run/{marker}").exists()
        assert w2.exec(f"test -e /run/{marker}", check=False).code == 1
        w1.exec(f"rm -rf /srv/round /run/{marker}")

    def test_put_files_writes_each_into_one_directory(
        self, contract_cluster: ContractCluster
    ) -> None:
        n1, w1 = contract_cluster.nodes[0], contract_cluster.witnesses[0]
        files = {"a.py": b"print('a')\n", "b.txt": bytes(range(256)), "empty": b""}
        n1.put_files("/srv/many/files", files, mode=0o640, owner="postgres")
        listed = w1.exec("cd /srv/many/files && stat -c '%n %a %U %s' * | sort").output
        assert listed.splitlines() == [
            "a.py 640 postgres 11",
            "b.txt 640 postgres 256",
            "empty 640 postgres 0",
        ]
        assert w1.exec("cat /srv/many/files/a.py").output == "print('a')\n"
        n1.put_files("/srv/many/files", {"a.py": b"again"})  # an existing file is replaced
        assert w1.exec("cat /srv/many/files/a.py").output == "again"
        w1.exec("rm -rf /srv/many")

    def test_signal_stops_continues_and_kills_without_zombie(
        self, contract_cluster: ContractCluster
    ) -> None:
        n1, w1 = contract_cluster.nodes[0], contract_cluster.witnesses[0]
        # Backgrounded so its launcher exits at once: the sleep is orphaned to PID 1 (tini),
        # which must reap it, as it must reap every daemon a cluster kind starts.
        n1.exec("sleep 1000 >/dev/null 2>&1 &", detach=True)
        pid = int(eventually(lambda: w1.exec("pgrep -f '^sleep 1000$'").output, "the sleep"))
        assert w1.exec(f"ps -o ppid= -p {pid}").output.strip() == "1"

        assert n1.signal("sleep 1000", "STOP") == [pid]
        eventually(lambda: state_of(w1, pid) == "T", "state T")
        assert n1.signal("sleep 1000", "CONT") == [pid]
        eventually(lambda: state_of(w1, pid) == "S", "state S")
        assert n1.signal("sleep 1000", "KILL") == [pid]
        eventually(lambda: state_of(w1, pid) == "", f"pid {pid} to vanish (a zombie has state Z)")
        assert n1.signal("sleep 1000", "KILL") == []

    @pytest.mark.parametrize("user", ["root", "postgres"])
    def test_signal_finds_the_detached_command_and_no_wrapper(
        self, contract_cluster: ContractCluster, user: str, request: pytest.FixtureRequest
    ) -> None:
        if user in self.wrapped_users:
            request.applymarker(
                pytest.mark.xfail(
                    strict=True, reason=f"the backend leaves a wrapper around {user}'s commands"
                )
            )
        n1, w1 = contract_cluster.nodes[0], contract_cluster.witnesses[0]
        pattern = f"sleep 41{41 if user == 'root' else 42}"
        n1.exec(f"exec {pattern}", user=user, detach=True)
        pids = eventually(lambda: n1.signal(pattern, "CONT"), "the detached sleep")
        # Only the command itself matches: a wrapper holding its command line would too.
        assert len(pids) == 1, f"more than the command matched: {pids}"
        pid = pids[0]
        assert n1.signal(pattern, "STOP") == [pid]
        eventually(lambda: state_of(w1, pid) == "T", "the process stopped")
        assert n1.signal(pattern, "CONT") == [pid]
        eventually(lambda: state_of(w1, pid) == "S", "the process running again")
        assert n1.signal(pattern, "KILL") == [pid]
        eventually(lambda: state_of(w1, pid) == "", "the process gone")

    def test_nodes_reach_each_other_by_hostname(self, contract_cluster: ContractCluster) -> None:
        nodes = contract_cluster.nodes
        for i, server in enumerate(nodes):
            serve(server, 7100 + i, f"from-{server.name}")
        # Each node a client of the one before it: every node is reached by its name.
        for i, server in enumerate(nodes):
            client = nodes[(i + 1) % len(nodes)]
            assert fetch(client, server.name, 7100 + i) == f"from-{server.name}"

    def test_control_machine_reaches_a_node_port_through_endpoint(
        self, contract_cluster: ContractCluster
    ) -> None:
        n1 = contract_cluster.nodes[0]
        serve(n1, contract_cluster.port, "from-n1")
        host, port = n1.endpoint(contract_cluster.port)

        def read() -> bytes:
            with socket.create_connection((host, port), timeout=5) as conn:
                return conn.recv(100)

        assert eventually(read, f"{host}:{port}") == b"from-n1\n"


class InitNodeContract(NodeContract):
    """Nodes whose `logs` are what their init (PID 1) printed: the docker and local backends."""

    def test_logs_show_what_the_init_printed(self, contract_cluster: ContractCluster) -> None:
        n1, n2 = contract_cluster.nodes[:2]
        n2.exec("echo marker-from-pid-1 > /proc/1/fd/1")
        assert "marker-from-pid-1" in n2.logs()
        assert "marker-from-pid-1" not in n1.logs()
