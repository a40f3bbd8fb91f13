"""The ssh backend against a real OpenSSH server: three node containers of the Docker backend run
sshd with fresh host keys, published on 127.0.0.1, and every test looks at a real effect on them
(through `docker exec`, not through the backend under test, where the effect is the point).

What every backend's nodes do is tested by `TestSshNode` (node_contract.py) on those hosts; the
rest here is the ssh backend's own."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from clusters.backend import Node
from clusters.docker_backend import DockerBackend
from clusters.kinds import postgres as pg
from clusters.kinds.single import SingleCluster
from clusters.registry import make_backend
from clusters.ssh_backend import (
    HOSTS_BEGIN,
    SshBackend,
    SshHost,
    owned_processes,
    parse_host,
    read_nodes_file,
    without_hosts_block,
)
from core.errors import BadInput, InfraError
from tests.integration.node_contract import ContractCluster, NodeContract, eventually

docker = pytest.mark.docker


@dataclass(frozen=True)
class Sshd:
    """A container running sshd, and where the control machine reaches it."""

    container: Node
    ssh_port: int
    pg_port: int
    host_key: str  # "ssh-ed25519 AAAA…", as in its /etc/ssh/ssh_host_ed25519_key.pub
    address: str  # on the Docker network, where the other containers reach it

    def spec(self) -> str:
        return f"127.0.0.1:{self.ssh_port},{pg.PORT}={self.pg_port}"

    def sh(self, cmd: str) -> str:
        """Run a command in the container past the backend under test."""
        return self.container.exec(cmd).output

    def has(self, path: str) -> bool:
        return self.container.exec(f"test -e {path}", check=False).code == 0


def _answers_ssh(port: int) -> bool:
    """Docker's proxy accepts before sshd listens, so wait for the server's banner."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        return s.recv(8).startswith(b"SSH-2.0")


@pytest.fixture(scope="module")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A fresh Ed25519 key pair: the private key file and the authorized_keys line."""
    key = Ed25519PrivateKey.generate()
    path = tmp_path_factory.mktemp("ssh") / "id_ed25519"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return path, public + b"\n"


@pytest.fixture(scope="module")
def sshds(
    docker_backend: DockerBackend, module_cluster_name: str, client_key: tuple[Path, bytes]
) -> list[Sshd]:
    """Three containers with sshd, standing for hosts (no state volume: /var/lib/harness is the
    ssh backend's to make and remove), reached through their published ports as another
    machine's would be; module_cluster_name takes them down."""
    found = []
    hosts = DockerBackend(state_volume=False, direct=False)
    for node in hosts.up(module_cluster_name, 3, [22, pg.PORT]):
        node.put_file("/root/.ssh/authorized_keys", client_key[1], mode=0o600)
        # Host keys of its own, not the ones the image build generated: each host differs.
        node.exec(
            "chmod 700 /root/.ssh && rm -f /etc/ssh/ssh_host_* && ssh-keygen -A >/dev/null "
            "&& mkdir -p /run/sshd && /usr/sbin/sshd"
        )
        ssh_port = node.endpoint(22)[1]
        eventually(lambda p=ssh_port: _answers_ssh(p), f"sshd on {node.name}")
        host_key = node.exec("cat /etc/ssh/ssh_host_ed25519_key.pub").output.split()[:2]
        address = node.exec("hostname -i").output.split()[0]
        found.append(Sshd(node, ssh_port, node.endpoint(pg.PORT)[1], " ".join(host_key), address))
    return found


@pytest.fixture(scope="module")
def known_hosts(tmp_path_factory: pytest.TempPathFactory, sshds: list[Sshd]) -> Path:
    path = tmp_path_factory.mktemp("ssh") / "known_hosts"
    path.write_text("".join(f"[127.0.0.1]:{s.ssh_port} {s.host_key}\n" for s in sshds))
    return path


@pytest.fixture(scope="module")
def backend(
    sshds: list[Sshd], client_key: tuple[Path, bytes], known_hosts: Path
) -> Iterator[SshBackend]:
    b = SshBackend(
        [parse_host(s.spec()) for s in sshds], key=client_key[0], known_hosts=known_hosts
    )
    yield b
    b.close()


@pytest.fixture
def ssh_cluster(backend: SshBackend) -> Iterator[str]:
    """A fresh cluster name on the ssh hosts; whatever the test claimed is given back after."""
    name = f"s{secrets.token_hex(4)}"
    yield name
    backend.down(name)


@pytest.fixture
def node(backend: SshBackend, ssh_cluster: str) -> Node:
    """n1 of a one-node cluster on the first host."""
    return backend.up(ssh_cluster, 1, [pg.PORT])[0]


@pytest.fixture(scope="class")
def contract_cluster(backend: SshBackend, sshds: list[Sshd]) -> Iterator[ContractCluster]:
    """A cluster on all three hosts for the contract tests, given back after the last of them."""
    name = f"s{secrets.token_hex(4)}"
    try:
        nodes = backend.up(name, 3, [pg.PORT])
        yield ContractCluster(
            backend, name, 3, nodes, pg.PORT, witnesses=[s.container for s in sshds]
        )
    finally:
        backend.down(name)


# --- what needs no server ---------------------------------------------------------------------


def test_host_specs_parse() -> None:
    assert parse_host("db1") == SshHost("db1", 22)
    assert parse_host("root@10.0.0.5:2222") == SshHost("10.0.0.5", 2222)
    assert parse_host(" 127.0.0.1:2222, 5432=15432 ") == SshHost("127.0.0.1", 2222, {5432: 15432})
    assert parse_host("[::1]:2200") == SshHost("::1", 2200)
    assert parse_host("fe80::1") == SshHost("fe80::1", 22)
    assert str(parse_host("[::1]:2200")) == "[::1]:2200"
    for bad in ("", "h:0", "h:ssh", "h,5432", "h,5432=x", "a b"):
        with pytest.raises(BadInput, match="bad ssh node"):
            parse_host(bad)
    with pytest.raises(BadInput, match="needs root"):
        parse_host("admin@db1")


def test_nodes_file_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "nodes"
    path.write_text("# the lab\nroot@db1\n\n  db2:2222  # spare\n#db3\n")
    assert read_nodes_file(path) == ["root@db1", "db2:2222"]
    with pytest.raises(BadInput, match="cannot read the nodes file"):
        read_nodes_file(tmp_path / "absent")


def test_backend_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="needs hosts"):
        make_backend("ssh")
    with pytest.raises(BadInput, match="listed twice"):
        make_backend("ssh", nodes=["db1", "root@db1:22"])
    with pytest.raises(BadInput, match="does not exist"):
        make_backend("ssh", nodes=["db1"], ssh_key=tmp_path / "absent")
    with pytest.raises(BadInput, match="--backend ssh only"):
        make_backend("docker", nodes=["db1"])


def test_hosts_block_is_replaced_and_removed() -> None:
    hosts = f"127.0.0.1 localhost\n{HOSTS_BEGIN}\n10.0.0.1 n1\n# END harness nodes\n::1 ip6\n"
    assert without_hosts_block(hosts) == "127.0.0.1 localhost\n::1 ip6\n"
    assert without_hosts_block("127.0.0.1 localhost") == "127.0.0.1 localhost\n"


def test_owned_processes_are_the_marked_and_data_dir_trees() -> None:
    ps = "\n".join(
        [
            "1 0 /usr/bin/tini -s -- sleep infinity",
            "10 1 sshd: /usr/sbin/sshd [listener]",
            "20 1 /usr/lib/postgresql/15/bin/postgres -D /var/lib/harness/pgdata",
            "21 20 postgres: checkpointer",
            "30 1 sleep 100",
            "31 30 sh -c child",
            "40 1 sleep 200",
            "50 1 runuser -u postgres -- env HARNESS_CLUSTER=c1 sh -c exec sleep 300",
            "51 50 sleep 300",
            "60 1 grep -lzs ^HARNESS_CLUSTE[R]= /proc/1/environ",
        ]
    )
    assert owned_processes(ps, marked={30}) == ([20, 30, 50], [20, 21, 30, 31, 50, 51])


# --- against the servers -----------------------------------------------------------------------


@docker
class TestSshNode(NodeContract):
    unknown_user_code = 1  # runuser's "user … does not exist"
    # runuser stays the parent of a user's command, with the command in its command line.
    wrapped_users = ("postgres",)


@docker
def test_up_claims_hosts_and_down_gives_them_back(
    backend: SshBackend, sshds: list[Sshd], ssh_cluster: str
) -> None:
    before = [s.sh("cat /etc/hosts") for s in sshds]
    nodes = backend.up(ssh_cluster, 3, [pg.PORT])
    for i, sshd in enumerate(sshds, start=1):
        assert sshd.sh("cat /var/lib/harness/cluster") == f"cluster={ssh_cluster}\nnode=n{i}\n"
        hosts = sshd.sh("cat /etc/hosts")
        assert all(f"{s.address} n{j}" in hosts for j, s in enumerate(sshds, start=1))
    assert nodes[0].exec("getent hosts n3").output.split() == [sshds[2].address, "n3"]

    removed = backend.down(ssh_cluster)
    assert removed == [f"n{i} (127.0.0.1:{s.ssh_port})" for i, s in enumerate(sshds, start=1)]
    assert [s.sh("cat /etc/hosts") for s in sshds] == before
    assert not any(s.has("/var/lib/harness") or s.has("/var/log/harness") for s in sshds)
    assert ssh_cluster not in backend.clusters()
    assert backend.nodes(ssh_cluster) == []
    assert backend.down(ssh_cluster) == []


@docker
def test_up_needs_as_many_hosts_as_nodes(backend: SshBackend, ssh_cluster: str) -> None:
    with pytest.raises(BadInput) as error:
        backend.up(ssh_cluster, 4, [])
    assert "needs 4 nodes but the ssh backend has 3 hosts" in str(error.value)
    assert "\n" not in str(error.value)
    assert ssh_cluster not in backend.clusters()


@docker
def test_up_refuses_a_claimed_host_and_releases_its_own(
    backend: SshBackend,
    sshds: list[Sshd],
    ssh_cluster: str,
    client_key: tuple[Path, bytes],
    known_hosts: Path,
) -> None:
    backend.up(ssh_cluster, 1, [])
    # The hosts in another order: the first (sshds[1]) is claimed, then sshds[0] refuses.
    reordered = SshBackend(
        [parse_host(sshds[1].spec()), parse_host(sshds[0].spec())],
        key=client_key[0],
        known_hosts=known_hosts,
    )
    other = f"s{secrets.token_hex(4)}"
    try:
        with pytest.raises(InfraError, match=f"is already n1 of cluster {ssh_cluster}"):
            reordered.up(other, 2, [])
        assert not sshds[1].has("/var/lib/harness")
        assert other not in backend.clusters()
    finally:
        reordered.down(other)
        reordered.close()


@docker
def test_logs_show_what_detached_commands_printed(node: Node) -> None:
    node.exec("echo hello from the background", detach=True)

    def logged() -> str:
        logs = node.logs()
        return logs if "hello from the background" in logs else ""

    logs = eventually(logged, "the detached command's output in the logs")
    assert "==> /var/log/harness/detached.log <==" in logs


@docker
def test_down_stops_what_the_harness_started_and_nothing_else(
    backend: SshBackend, sshds: list[Sshd], ssh_cluster: str
) -> None:
    host = sshds[0]
    node = backend.up(ssh_cluster, 1, [])[0]
    node.exec("exec sleep 4242", detach=True)
    node.exec("exec sleep 4343", user="postgres", detach=True)
    # Like a daemon with its data directory on its command line and a child without, but
    # started past the harness (as a daemon's children may drop the environment).
    host.container.exec("sleep 4646; : /var/lib/harness/pgdata", detach=True)
    # Not the harness's: must survive.
    host.container.exec("exec sleep 4444", detach=True)
    for pattern in ("sleep 4242", "sleep 4343", "sleep 4646"):
        eventually(lambda p=pattern: node.signal(p, "CONT"), pattern)
    node.signal("sleep 4242", "STOP")  # a paused process must go too
    host.sh("touch /dev/shm/faketime_shm_999999 /dev/shm/faketime_shm_1")
    try:
        assert backend.down(ssh_cluster) == [f"n1 (127.0.0.1:{host.ssh_port})"]
        left = host.sh("ps -eo args=")
        for gone in ("sleep 4242", "sleep 4343", "sleep 4646", "/var/lib/harness"):
            assert gone not in left
        assert "sleep 4444" in left
        assert not host.has("/dev/shm/faketime_shm_999999")
        assert host.has("/dev/shm/faketime_shm_1")  # pid 1 lives: not a leftover
    finally:
        host.sh("pkill -f 'sleep 444[4]'; rm -f /dev/shm/faketime_shm_1")


@docker
def test_reconnects_after_the_connection_drops(node: Node, sshds: list[Sshd]) -> None:
    assert node.exec("echo before").output == "before\n"
    sshds[0].sh("pkill -f 'sshd: root@nott[y]'")  # exits 1 if no session matched
    assert node.exec("echo after").output == "after\n"


@docker
def test_a_wrong_host_key_is_refused_unless_insecure(
    sshds: list[Sshd], client_key: tuple[Path, bytes], tmp_path: Path
) -> None:
    impostor = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshds[0].ssh_port} {impostor}\n")
    hosts = [parse_host(sshds[0].spec())]
    refusing = SshBackend(hosts, key=client_key[0], known_hosts=wrong)
    with pytest.raises(BadInput) as error:
        refusing.clusters()
    message = str(error.value)
    assert f"the host key of 127.0.0.1:{sshds[0].ssh_port}" in message
    assert "does not match" in message and "\n" not in message

    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(BadInput, match=r"is not in .*--ssh-insecure"):
        SshBackend(hosts, key=client_key[0], known_hosts=empty).clusters()

    trusting = SshBackend(hosts, key=client_key[0], known_hosts=wrong, insecure=True)
    try:
        assert isinstance(trusting.clusters(), list)
    finally:
        trusting.close()


@docker
def test_a_key_the_host_does_not_accept_is_refused(
    sshds: list[Sshd], known_hosts: Path, tmp_path: Path
) -> None:
    stranger = tmp_path / "id_stranger"
    stranger.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    b = SshBackend([parse_host(sshds[0].spec())], key=stranger, known_hosts=known_hosts)
    with pytest.raises(BadInput, match=f"cannot log in to 127.0.0.1:{sshds[0].ssh_port}"):
        b.clusters()


def test_an_unreachable_host_is_one_sentence(
    client_key: tuple[Path, bytes], tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    b = SshBackend([parse_host(f"127.0.0.1:{port}")], key=client_key[0])
    with pytest.raises(InfraError) as error:
        b.nodes("any")
    assert str(error.value) == f"cannot reach 127.0.0.1:{port} over SSH: connection refused"


@docker
def test_the_single_cluster_runs_on_an_ssh_host(
    backend: SshBackend, sshds: list[Sshd], ssh_cluster: str, tmp_path: Path
) -> None:
    kind = SingleCluster(backend, ssh_cluster, {})
    kind.deploy(lambda _: None)
    (endpoint,) = kind.endpoints()
    assert (endpoint.host, endpoint.port) == ("127.0.0.1", sshds[0].pg_port)
    with psycopg.connect(
        host=endpoint.host,
        port=endpoint.port,
        dbname=endpoint.dbname,
        user=endpoint.user,
        connect_timeout=10,
    ) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert kind.status()["nodes"]["n1"]["postgres"] == "up"
    kind.collect(tmp_path)
    assert (tmp_path / "n1" / "harness" / "postgres.log").is_file()
    assert (
        "==> /var/log/harness/postgres.log <==" in (tmp_path / "n1" / "container.log").read_text()
    )

    kind.teardown()
    host = sshds[0]
    assert host.container.exec("pgrep -u postgres", check=False).code == 1
    assert not host.has("/var/lib/harness")
    assert HOSTS_BEGIN not in host.sh("cat /etc/hosts")
