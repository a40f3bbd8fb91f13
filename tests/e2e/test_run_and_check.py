"""`harness run` end to end against real Postgres in Docker, then `harness check` on its history."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import docker
import pytest

from tests.e2e.conftest import HARNESS, harness

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def run_dir_of(store: Path) -> Path:
    return (store / "latest").resolve()


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def harness_containers(cluster: str) -> list[str]:
    client = docker.from_env()
    label = f"harness.cluster={cluster}"
    found = [c.name for c in client.containers.list(all=True, filters={"label": label})]
    found += [n.name for n in client.networks.list(filters={"label": label})]
    return found


def test_set_run_is_valid_and_a_removed_ack_is_caught(store: Path, tmp_path: Path) -> None:
    result = harness(
        "run",
        "--workload",
        "set",
        "--time",
        "20",
        "--rate",
        "50",
        "--store",
        str(store),
        "--settle",
        "1",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run = run_dir_of(store)
    assert "report.html" in result.stdout
    results = json.loads((run / "results.json").read_text())
    assert results["verdict"] == "valid"
    assert (run / "ops.parquet").exists() and (run / "report.html").exists()
    config = json.loads((run / "config.json").read_text())
    assert harness_containers(config["cluster_name"]) == []  # torn down

    # Remove one acknowledged add from the final read: the checker must name it as lost.
    history = events(run / "history.jsonl")
    acked = [e["value"] for e in history if e["f"] == "add" and e["type"] == "ok"]
    victim = acked[len(acked) // 2]
    final = max(
        (e for e in history if e["f"] == "read" and e["type"] == "ok"), key=lambda e: e["index"]
    )
    final["value"] = [v for v in final["value"] if v != victim]
    doctored = tmp_path / "doctored.jsonl"
    doctored.write_text("".join(json.dumps(e) + "\n" for e in history))

    # One check of both (each path gets its verdict and report; the exit code is the worst),
    # as one process: a check starts Spark once, which is most of its time.
    checked_before = (run / "results.json").stat().st_mtime_ns
    both = harness("check", str(doctored), str(run), "--workload", "set")
    assert both.returncode == 1, both.stdout + both.stderr
    assert (run / "results.json").stat().st_mtime_ns > checked_before  # checked again
    assert json.loads((run / "results.json").read_text())["verdict"] == "valid"
    bad = tmp_path / "doctored-check"
    out = json.loads((bad / "results.json").read_text())
    lost = [a for a in out["checkers"]["set"]["anomalies"] if a["type"] == "lost"]
    assert lost and str(victim) in lost[0]["explanation"]
    assert "lost" in (bad / "report.html").read_text()
    assert str(victim) in (bad / "report.html").read_text()


def test_default_bank_and_append_run(store: Path) -> None:
    """The users' command as written: both workloads on the safekeeper cluster, both valid."""
    result = harness("run", "--time", "15", "--store", str(store), "--settle", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((run_dir_of(store) / "results.json").read_text())
    assert results["checkers"]["bank"]["valid"] is True
    assert results["checkers"]["append"]["valid"] is True
    # one primary at a time: serializable is held to its real-time variant
    assert results["checkers"]["append"]["model"] == "strict-serializable"
    history = events(run_dir_of(store) / "history.jsonl")
    assert {e["workload"] for e in history} == {"bank", "append"}
    assert any(e["f"] == "transfer" and e["type"] == "ok" for e in history)


def test_kill_9_leaves_a_checkable_history_and_down_cleans_up(store: Path) -> None:
    proc = subprocess.Popen(
        [HARNESS, "run", "--workload", "set", "--time", "120", "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        history = None
        while time.monotonic() < deadline:
            latest = store / "latest"
            if latest.exists() and (latest / "history.jsonl").exists():
                history = latest.resolve() / "history.jsonl"
                if len(history.read_text().splitlines()) > 200:
                    break
            time.sleep(0.5)
        assert history is not None, "the run never started writing its history"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    run = history.parent
    cluster = json.loads((run / "config.json").read_text())["cluster_name"]
    assert harness_containers(cluster)  # the crash left the cluster up

    checked = harness("check", str(run))
    assert checked.returncode in (0, 2), checked.stdout + checked.stderr
    assert (run / "results.json").exists()

    down = harness("cluster", "down", cluster)
    assert down.returncode == 0, down.stderr
    assert harness_containers(cluster) == []
