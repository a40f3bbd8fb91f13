"""`harness run` on the safekeeper cluster with the primary cut off from the other nodes: with one
compute, commits stall during the partition and resume after; with two, the standby takes over
and commits go on through it, in either mode; and a planted bug that acknowledges before the
quorum is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import harness

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

SECOND = 1_000_000_000


def test_commits_stall_while_the_compute_node_is_cut_off(store: Path) -> None:
    result = harness(
        "run", "--cluster", "safekeeper", "--computes", "1", "--workload", "set",
        "--nemesis", "partition-primary", "--nemesis-interval", "8", "--time", "30",
        "--settle", "2", "--store", str(store),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run = (store / "latest").resolve()
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    windows = partition_windows(history)
    assert windows, [e for e in history if e["process"] == "nemesis"]
    start, stop = windows[0]
    added = [e["time"] for e in history if e["type"] == "ok" and e.get("f") == "add"]
    # a commit already past the quorum when the rules went in may still land
    window = (start + 2 * SECOND, stop)
    assert window[1] - window[0] > 2 * SECOND
    during = [t for t in added if window[0] < t < window[1]]
    after = [t for t in added if t > stop]
    assert during == [], f"{len(during)} adds committed while n1 was cut off from every safekeeper"
    assert len(after) > 100, "commits did not resume after the partition healed"
    status = json.loads((run / "nodes" / "cluster-status.json").read_text())
    assert status["kind"] == "safekeeper" and status["term"] >= 1


def partition_windows(history: list[dict]) -> list[tuple[int, int]]:
    """When each partition was surely in place: from its start's completion (the rules are in)
    to its stop's invocation (the heal begins; commits resume on the first healed node, before
    the last node's heal completes and the stop is recorded)."""
    faults = [e for e in history if e["process"] == "nemesis"]
    starts = [e["time"] for e in faults if e["f"] == "start-partition" and e["type"] == "info"]
    stops = [e["time"] for e in faults if e["f"] == "stop-partition" and e["type"] == "invoke"]
    return list(zip(starts, stops, strict=False))


def run_partitioned(store: Path, *extra: str) -> tuple[int, Path, list[dict]]:
    """Seed 0's schedule at a 15 s interval cuts the primary off from about 10 s to 29 s: a
    takeover needs 5 s of silence, then a promotion, which on a loaded machine took more than
    the 13 s a 10 s interval gives."""
    result = harness(
        "run", "--cluster", "safekeeper", "--workload", "set", "--nemesis", "partition-primary",
        "--nemesis-interval", "15", "--time", "32", "--settle", "2", "--seed", "0",
        "--store", str(store), *extra,
    )  # fmt: skip
    run = (store / "latest").resolve()
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    return result.returncode, run, history


def test_the_standby_takes_over_while_the_primary_is_cut_off(store: Path) -> None:
    code, run, history = run_partitioned(store)
    assert code == 0, (run / "results.json").read_text()
    (start, stop), *_ = partition_windows(history)
    served = {e["node"] for e in history if e["type"] == "ok" and start < e["time"] < stop}
    assert "n2" in served, f"no commit went through n2 while n1 was cut off: {served}"
    logs = (run / "nodes" / "n2" / "harness" / "compute.log").read_text()
    assert "taking over" in logs and "elected in term" in logs
    moments = json.loads((run / "results.json").read_text())["checkers"]["cluster-state"]
    reached = {m["moment"]: m["reached"] for m in moments["moments"]}
    assert reached["term-won"] >= 1 and "inherited-limbo" not in reached, reached


def test_a_planted_acknowledgement_before_the_quorum_loses_writes(store: Path) -> None:
    code, run, _ = run_partitioned(store, "--bug", "ack-before-quorum")
    results = json.loads((run / "results.json").read_text())
    assert code == 1, results
    assert results["checkers"]["set"]["valid"] is False


def test_the_confirm_rollback_mode_fails_over_and_stays_valid(store: Path) -> None:
    code, run, history = run_partitioned(store, "--mode", "confirm-rollback")
    assert code == 0, (run / "results.json").read_text()
    (start, stop), *_ = partition_windows(history)
    served = {e["node"] for e in history if e["type"] == "ok" and start < e["time"] < stop}
    assert "n2" in served, f"no write was confirmed through n2 while n1 was cut off: {served}"
    logs = (run / "nodes" / "n2" / "harness" / "compute.log").read_text()
    took_over = logs.index("taking over")
    assert "no transaction of an earlier leader waits: taking writes" in logs[took_over:]


def test_writes_acknowledged_without_fsync_are_named_lost_after_a_power_fault(
    store: Path,
) -> None:
    """`--bug skip-fsync` under `power`: seed 0's first fault (about 15 s in) powers every
    safekeeper off, and each comes back with only the WAL it ever synced. The writes whose WAL
    positions lie past what any safekeeper holds are named, from the history's own `lsn`s, and
    the cluster, which never serves again, is `not-recovered`."""
    result = harness(
        "run", "--cluster", "safekeeper", "--workload", "set", "--nemesis", "power",
        "--bug", "skip-fsync", "--time", "30", "--settle", "2", "--seed", "0",
        "--store", str(store),
    )  # fmt: skip
    run = (store / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert result.returncode == 1, results
    state = results["checkers"]["cluster-state"]
    assert "lost-acknowledged-write" in state["anomaly_types"], state["anomaly_types"]
    lost = next(a for a in state["anomalies"] if a["type"] == "lost-acknowledged-write")
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    acked = {e["index"]: e for e in history if e["type"] == "ok" and "lsn" in e}
    for op in lost["ops"]:
        assert acked[op["complete_index"]]["lsn"] == op["lsn"]
    assert lost["count"] >= len(lost["ops"]) > 0
    # The safekeepers refuse every election that would truncate the committed WAL they lost:
    # the run waits out the recovery limit after its final reads, and names who stayed behind.
    behind = next(a for a in state["anomalies"] if a["type"] == "not-recovered")
    assert any("below the commit position" in why for why in behind["missing"]), behind
