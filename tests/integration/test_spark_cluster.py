"""`--spark-master spark://…`: the analysis on a standalone Spark cluster, as README describes it.
A master and one worker are started from the installed pyspark's own launcher, on loopback; a run
that lost an acknowledged add is checked against them and gets the verdict it gets locally, and
the worker shows that an executor of the check ran on it. Both are stopped whatever happens."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from tests.e2e.conftest import harness
from tests.runs_store import LOST, make_run

pytestmark = pytest.mark.e2e

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=2) as r:
        return json.load(r)


def wait_for(what: str, check, timeout: float = 90) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            if found := check():
                return found
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{what} did not come within {timeout:g} s"
        time.sleep(0.5)


def daemon(log: Path, *args: str) -> subprocess.Popen:
    env = os.environ | {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    with log.open("w") as out:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A standalone master and one worker (1 core, 1 GiB): the master URL and the worker's UI."""
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    started = [
        daemon(tmp_path / "master.log", "org.apache.spark.deploy.master.Master",
               "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui)),
        daemon(tmp_path / "worker.log", "org.apache.spark.deploy.worker.Worker", url,
               "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
               "--webui-port", str(worker_ui), "--work-dir", str(tmp_path / "work")),
    ]  # fmt: skip
    try:
        wait_for("a live worker", lambda: status(master_ui).get("aliveworkers"))
        yield url, worker_ui
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_a_run_checked_on_a_spark_cluster_gets_its_verdict_from_an_executor_there(
    tmp_path: Path, spark_cluster: tuple[str, int]
) -> None:
    url, worker_ui = spark_cluster
    run = make_run(tmp_path / "results", "single-set-none", "20261124T120000", lose=True)
    done = harness("check", str(run), "--spark-master", url, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    results = json.loads((run / "results.json").read_text())
    lost = results["checkers"]["set"]["anomalies"]
    assert [a["type"] for a in lost] == ["lost"], lost
    assert lost[0]["explanation"].startswith(f"element {LOST} was lost"), lost
    executors = wait_for(
        "the check's executor among the worker's finished ones",
        lambda: status(worker_ui).get("finishedexecutors"),
        timeout=30,
    )
    assert any(e.get("appdesc", {}).get("name") == "harness-check" for e in executors), executors
