"""Manatee's cluster state, as the harness polls it from a real ZooKeeper ensemble, held to seed
004's rules: a correct cluster's first generation keeps them, and a next generation declared by
a peer that was neither P nor S (written into ZooKeeper here, as a faulty sitter would) is
named."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from checkers.cluster_state import analyse
from clusters.docker_backend import DockerBackend
from clusters.kinds.manatee import ZK_PORT, ZK_ROOT, ManateeCluster
from core.polls import COORDINATION, Round
from tests.integration.conftest import eventually

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def cluster(docker_backend: DockerBackend, module_cluster_name: str) -> Iterator[ManateeCluster]:
    kind = ManateeCluster(docker_backend, module_cluster_name, {})
    kind.deploy(lambda _: None)
    yield kind


def test_a_generation_declared_by_an_outsider_is_named(cluster: ManateeCluster) -> None:
    eventually(lambda: COORDINATION in cluster.poll(), "the first generation", 120)
    rounds = [Round(time=1, nodes=cluster.poll())]
    assert analyse(rounds, cluster.state_rules)["valid"] is True
    hosts = ",".join("{}:{}".format(*z.endpoint(ZK_PORT)) for z in cluster.zookeepers())
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        data, stat = zk.get(f"{ZK_ROOT}/state")
        state = json.loads(data)
        outsider = next(p.name for p in cluster.peers() if p.name not in (state["primary"],
                        state["sync"]))  # fmt: skip
        forged = {**state, "generation": state["generation"] + 1, "primary": outsider,
                  "sync": state["primary"], "async": [state["sync"]]}  # fmt: skip
        zk.set(f"{ZK_ROOT}/state", json.dumps(forged).encode(), version=stat.version)
        rounds.append(Round(time=2, nodes=cluster.poll()))
    finally:
        zk.stop()
        zk.close()
    result = analyse(rounds, cluster.state_rules)
    assert result["anomaly_types"] == ["takeover-by-outsider"], result["anomalies"]
    assert f"(P {outsider}," in result["anomalies"][0]["explanation"]
