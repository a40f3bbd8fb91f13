"""The Docker backend against a real engine: every test looks at an effect on real containers.

What every backend's nodes do is tested by `TestDockerNode` (node_contract.py); the rest here is
the Docker backend's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters import power
from clusters.backend import LOG_DIR, Node
from clusters.docker_backend import CLUSTER_LABEL, DockerBackend
from core.errors import BadInput, InfraError
from tests.integration.node_contract import ContractCluster, InitNodeContract

pytestmark = pytest.mark.docker

HTTP_PORT = 8000
Pair = tuple[str, list[Node]]  # the module cluster's name and its nodes


@pytest.fixture(scope="module")
def pair(docker_backend: DockerBackend, module_cluster_name: str) -> Pair:
    """The module's 2-node cluster, publishing HTTP_PORT; module_cluster_name takes it down."""
    return module_cluster_name, docker_backend.up(module_cluster_name, 2, [HTTP_PORT])


@pytest.fixture(scope="module")
def contract_cluster(docker_backend: DockerBackend, pair: Pair) -> ContractCluster:
    name, nodes = pair
    return ContractCluster(docker_backend, name, 2, nodes, HTTP_PORT, witnesses=nodes)


class TestDockerNode(InitNodeContract):
    unknown_user_code = 126  # Docker's "unable to find user"


def labelled(backend: DockerBackend, cluster: str) -> list[str]:
    """Names of every container and network the engine still has with the cluster's label."""
    label = {"label": f"{CLUSTER_LABEL}={cluster}"}
    return [c.name for c in backend.client.containers.list(all=True, filters=label)] + [
        n.name for n in backend.client.networks.list(filters=label)
    ]


def test_hostname_is_the_node_name(pair: Pair) -> None:
    assert [n.exec("hostname").output.strip() for n in pair[1]] == ["n1", "n2"]


def test_endpoint_is_the_nodes_own_address_where_this_machine_is_on_its_network(
    docker_backend: DockerBackend, pair: Pair
) -> None:
    """A local engine's bridge is this machine's: clients go to the node straight, not through
    the engine's proxy of the published port (the contract tests that it is reached)."""
    name, (n1, n2) = pair
    found = {}
    for node in (n1, n2):
        container = docker_backend.client.containers.get(f"harness-{name}-{node.name}")
        (settings,) = container.attrs["NetworkSettings"]["Networks"].values()
        found[node.name] = settings["IPAddress"]
    assert n1.endpoint(HTTP_PORT) == (found["n1"], HTTP_PORT)
    assert n2.endpoint(HTTP_PORT) == (found["n2"], HTTP_PORT)
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


def test_a_nodes_state_and_logs_are_on_volumes_of_its_own_removed_with_it(
    docker_backend: DockerBackend, cluster_name: str
) -> None:
    """/var/lib/harness and /var/log/harness are the host's filesystem, not the image's
    layered one, and another node's volumes are not this one's; `down` leaves no volume
    behind."""
    n1, n2 = docker_backend.up(cluster_name, 2, [])
    mounts = [line.split() for line in n1.exec("cat /proc/mounts").output.splitlines()]
    root = next(m[2] for m in mounts if m[1] == "/")
    for directory in (power.NODE_DIR, LOG_DIR):
        (fs,) = [m[2] for m in mounts if m[1] == directory]
        assert fs != root and "fuse" not in fs and "overlay" not in fs, (directory, fs, root)
        n1.exec(f"echo mine > {directory}/probe")
        assert n2.exec(f"cat {directory}/probe", check=False).code != 0
    containers = docker_backend.client.containers.list(
        all=True, filters={"label": f"{CLUSTER_LABEL}={cluster_name}"}
    )
    volumes = [m["Name"] for c in containers for m in c.attrs["Mounts"] if m["Type"] == "volume"]
    assert len(volumes) == 4
    docker_backend.down(cluster_name)
    left = {v.name for v in docker_backend.client.volumes.list()}
    assert not left & set(volumes)


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
