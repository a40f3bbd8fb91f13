"""The power fault on real Postgres, in a container or a namespace node (docker and local
backends) whose state sits on the power layer: with
`fsync = off` it loses commits it acknowledged (the positive control: the fault can lose what
was not made durable), with `fsync = on` it loses none, and the node starts again as after a
machine restart."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from clusters.backend import Backend
from clusters.docker_backend import DockerBackend
from clusters.kinds import postgres as pg
from clusters.kinds.single import SingleCluster
from clusters.local_backend import LocalBackend
from core.errors import BadInput
from nemesis.power import Power
from tests.integration.conftest import eventually
from tests.integration.test_faults import cluster_of

pytestmark = pytest.mark.docker

ROWS = 200


@pytest.fixture(params=["docker", "local"])
def single(
    request: pytest.FixtureRequest, docker_backend: DockerBackend
) -> Iterator[SingleCluster]:
    """One Postgres node whose state is on the power layer, on either backend that offers it."""
    backend: Backend
    if request.param == "docker":
        backend = DockerBackend(power=True)
    else:
        try:
            backend = LocalBackend(power=True)
        except BadInput as e:
            pytest.skip(str(e))
    yield from cluster_of(backend, SingleCluster, {})


def connect(cluster: SingleCluster) -> psycopg.Connection:
    ep = cluster.endpoints()[0]
    return psycopg.connect(
        host=ep.host, port=ep.port, dbname=ep.dbname, user=ep.user, autocommit=True
    )


def commits_kept(cluster: SingleCluster, fsync: str) -> int:
    """Acknowledge ROWS commits with Postgres's `fsync` setting, cut the power, count the rows."""
    with connect(cluster) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("CHECKPOINT")  # the table itself is durable
        conn.execute(f"ALTER SYSTEM SET fsync = {fsync}")
        conn.execute("SELECT pg_reload_conf()")
        for i in range(ROWS):
            conn.execute("INSERT INTO t VALUES (%s)", (i,))
    fault = Power("one", ["n1"])
    done = fault.start(cluster)
    assert "lost" in done["lost"]["n1"], done
    fault.stop(cluster)
    (node,) = cluster.nodes
    eventually(lambda: pg.is_ready(node), "Postgres up again after the power came back", 60)
    with connect(cluster) as conn:
        return conn.execute("SELECT count(*) FROM t").fetchone()[0]


def test_without_fsync_acknowledged_commits_are_lost(single: SingleCluster) -> None:
    assert commits_kept(single, "off") < ROWS


def test_with_fsync_no_acknowledged_commit_is_lost(single: SingleCluster) -> None:
    assert commits_kept(single, "on") == ROWS
