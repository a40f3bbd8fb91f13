"""The `single` cluster kind and the workloads' clients against a real Postgres 15 in Docker.

Also the error classification where it matters most: a connection lost or a timeout while COMMIT
is in flight must be `info`; a serialization failure must be `fail`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from clusters.backend import Backend
from clusters.kinds import postgres as pg
from clusters.kinds.single import SingleCluster
from core.endpoint import Endpoint
from core.errors import InfraError
from harness.cli import cli
from workloads import build
from workloads.base import Workload, WorkloadOptions
from workloads.postgres import PostgresClient

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def single(docker_backend: Backend, module_cluster_name: str) -> Iterator[SingleCluster]:
    kind = SingleCluster(docker_backend, module_cluster_name, {})
    kind.deploy(lambda msg: None)
    yield kind


@pytest.fixture(scope="module")
def endpoint(single: SingleCluster) -> Endpoint:
    return single.endpoints()[0]


def client(ep: Endpoint, isolation: str = "serializable", timeout: float = 5.0) -> PostgresClient:
    return PostgresClient(ep.host, ep.port, ep.dbname, ep.user, isolation, timeout)


def setup(ep: Endpoint, workload: Workload) -> None:
    c = client(ep)
    conn = c.connect()
    workload.setup(conn)
    conn.commit()
    c.close()


def test_status_and_leader(single: SingleCluster) -> None:
    status = single.status()
    assert status["leader"] == "n1"
    assert status["nodes"]["n1"]["postgres"] == "up"


def test_cluster_status_knows_the_kind_the_cluster_was_brought_up_as(
    single: SingleCluster, module_cluster_name: str
) -> None:
    """`harness cluster status --name X` with no --cluster: the first node says the kind (here
    `single`, where the command's default kind is `safekeeper`), and its options."""
    shown = CliRunner().invoke(cli, ["cluster", "status", "--name", module_cluster_name, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["kind"] == "single"
    assert SingleCluster.declared(single.nodes) == ("single", {})


def test_bank_transfers_keep_the_total(endpoint: Endpoint) -> None:
    (bank,) = build(["bank"], WorkloadOptions())
    setup(endpoint, bank)
    c = client(endpoint)
    done = c.run(bank, "transfer", {"from": 0, "to": 1, "amount": 3})
    assert done.type == "ok"
    read = c.run(bank, "read", None)
    assert read.type == "ok"
    assert sum(read.value.values()) == 100
    assert read.value["0"] == 17 and read.value["1"] == 23
    too_much = c.run(bank, "transfer", {"from": 2, "to": 3, "amount": 1000})
    assert too_much.type == "fail" and "insufficient" in (too_much.error or "")
    c.close()


def test_append_reads_return_lists_in_append_order(endpoint: Endpoint) -> None:
    (append,) = build(["append"], WorkloadOptions())
    setup(endpoint, append)
    c = client(endpoint)
    assert c.run(append, "txn", [["append", 900, 1], ["append", 900, 2]]).type == "ok"
    done = c.run(append, "txn", [["append", 900, 3], ["r", 900, None], ["r", 901, None]])
    assert done.type == "ok"
    assert done.value == [["append", 900, 3], ["r", 900, [1, 2, 3]], ["r", 901, []]]
    c.close()


def test_set_adds_are_read_back(endpoint: Endpoint) -> None:
    (sets,) = build(["set"], WorkloadOptions())
    setup(endpoint, sets)
    c = client(endpoint)
    for e in (5, 6, 7):
        assert c.run(sets, "add", e).type == "ok"
    dup = c.run(sets, "add", 5)
    assert dup.type == "fail" and dup.error.startswith("23505")
    assert {5, 6, 7} <= set(c.run(sets, "read", None).value)
    c.close()


class SqlWorkload(Workload):
    """Runs the statements it is given: lets a test make a transaction slow where it wants."""

    name = "sql"
    checkers = ()

    def setup(self, conn: psycopg.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS slow_commit (id int PRIMARY KEY)")
        conn.execute(
            "CREATE OR REPLACE FUNCTION sleep_at_commit() RETURNS trigger AS "
            "$$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$ LANGUAGE plpgsql"
        )
        conn.execute("DROP TRIGGER IF EXISTS slow ON slow_commit")
        conn.execute(
            "CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON slow_commit "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sleep_at_commit()"
        )

    def next_op(self, rng: Any) -> tuple[str, Any]:
        raise NotImplementedError

    @staticmethod
    def writes(f: str, value: Any) -> bool:
        return True

    def invoke(self, conn: psycopg.Connection, f: str, value: Any) -> Any:
        for statement in value:
            conn.execute(statement)
        return value

    def final_ops(self) -> list[tuple[str, Any]]:
        return []


@pytest.fixture(scope="module")
def sql(endpoint: Endpoint) -> SqlWorkload:
    workload = SqlWorkload(WorkloadOptions())
    setup(endpoint, workload)
    return workload


def backend_pid_of(ep: Endpoint, row: int) -> int:
    """The pid of the backend that is committing `row` (seen waiting in pg_sleep)."""
    with psycopg.connect(
        host=ep.host, port=ep.port, dbname=ep.dbname, user=ep.user, autocommit=True
    ) as admin:
        for _ in range(50):
            found = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE query ILIKE 'COMMIT%' "
                "AND wait_event = 'PgSleep'"
            ).fetchone()
            if found:
                return found[0]
            time.sleep(0.1)
    raise AssertionError(f"no backend was committing row {row}")


def test_connection_killed_during_commit_is_info(endpoint: Endpoint, sql: SqlWorkload) -> None:
    c = client(endpoint)
    results = []
    worker = threading.Thread(
        target=lambda: results.append(c.run(sql, "w", ["INSERT INTO slow_commit VALUES (1)"]))
    )
    worker.start()
    pid = backend_pid_of(endpoint, 1)
    with psycopg.connect(
        host=endpoint.host,
        port=endpoint.port,
        dbname=endpoint.dbname,
        user=endpoint.user,
        autocommit=True,
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    worker.join(10)
    assert results[0].type == "info", results[0]


def test_timeout_during_commit_is_info(endpoint: Endpoint, sql: SqlWorkload) -> None:
    c = client(endpoint, timeout=1.0)
    done = c.run(sql, "w", ["INSERT INTO slow_commit VALUES (2)"])
    assert done.type == "info"
    assert "no answer within 1s" in (done.error or "")


def test_timeout_before_commit_is_fail(endpoint: Endpoint, sql: SqlWorkload) -> None:
    c = client(endpoint, timeout=1.0)
    done = c.run(sql, "w", ["SELECT pg_sleep(3)", "INSERT INTO slow_commit VALUES (3)"])
    assert done.type == "fail"
    assert "no answer within 1s" in (done.error or "")
    assert c.run(sql, "w", ["SELECT 1"]).type == "ok"  # the client reconnects after a timeout


def test_serialization_failure_is_fail(endpoint: Endpoint) -> None:
    (bank,) = build(["bank"], WorkloadOptions())
    setup(endpoint, bank)
    a, b = client(endpoint).connect(), client(endpoint).connect()
    a.execute("SELECT balance FROM bank_accounts WHERE id = 0")
    b.execute("SELECT balance FROM bank_accounts WHERE id = 0")
    a.execute("UPDATE bank_accounts SET balance = balance WHERE id = 0")
    a.commit()
    c = client(endpoint)
    c._conn = b  # continue b's open transaction through the client's classification
    done = c.run(bank, "transfer", {"from": 0, "to": 1, "amount": 1})
    assert done.type == "fail"
    assert (done.error or "").startswith("40001")
    a.close()
    c.close()


def test_a_pipelined_append_refused_at_its_first_statement_is_fail(endpoint: Endpoint) -> None:
    """Without --op-pause an append transaction's statements go in one pipeline: the error of
    the first must still make the operation a definite failure, and leave the client usable."""
    (append,) = build(["append"], WorkloadOptions(isolation="repeatable-read"))
    setup(endpoint, append)
    a = client(endpoint, isolation="repeatable-read")
    b = client(endpoint, isolation="repeatable-read").connect()
    b.execute("SELECT 1")  # b's snapshot, taken before a's append commits
    assert a.run(append, "txn", [["append", 950, 1]]).type == "ok"
    c = client(endpoint, isolation="repeatable-read")
    c._conn = b  # continue b's transaction through the client
    done = c.run(append, "txn", [["append", 950, 2], ["r", 950, None], ["r", 951, None]])
    assert done.type == "fail" and (done.error or "").startswith("40001"), done
    again = c.run(append, "txn", [["append", 950, 3], ["r", 950, None]])
    assert again.type == "ok" and again.value == [["append", 950, 3], ["r", 950, [1, 3]]]
    a.close()
    c.close()


def test_collect_copies_the_postgres_log(single: SingleCluster, tmp_path: Path) -> None:
    single.collect(tmp_path)
    assert (tmp_path / "n1" / "harness" / "postgres.log").exists() or any(
        p.name == "postgres.log" for p in (tmp_path / "n1").rglob("*")
    )


def test_a_cluster_that_does_not_come_up_leaves_its_nodes_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_backend: Backend
) -> None:
    """A deploy that fails on a real node: the run ends as an infrastructure error, with what
    the node logged in the run folder, and the node torn down."""

    def broken(self: SingleCluster, say: Any) -> None:
        (node,) = self.bring_up(say, [pg.PORT], "n1, one Postgres 15")
        node.exec(f"mkdir -p {pg.LOG_DIR} && echo 'FATAL: last words' > {pg.LOG_DIR}/pg.log")
        raise InfraError("Postgres on n1 did not start")

    monkeypatch.setattr(SingleCluster, "deploy", broken)
    args = ["run", "--cluster", "single", "--time", "5", "--store", str(tmp_path), "--name", "x"]
    result = CliRunner().invoke(cli, args)
    # the command's main turns this error into exit code 255 and its one sentence
    assert isinstance(result.exception, InfraError), result.output
    (run,) = (tmp_path / "x").glob("2*")
    logs = run / "nodes" / "n1"
    assert "FATAL: last words" in (logs / "harness" / "pg.log").read_text()
    assert (logs / "container.log").exists() and str(run / "nodes") in result.output
    config = json.loads((run / "config.json").read_text())
    assert docker_backend.nodes(config["cluster_name"]) == []
