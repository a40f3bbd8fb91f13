"""`harness run` on the safekeeper cluster with the compute node cut off from the safekeepers:
valid, and the history itself shows commits stalling during the partition and resuming after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import harness

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

SECOND = 1_000_000_000


def test_commits_stall_while_the_compute_node_is_cut_off(store: Path) -> None:
    result = harness(
        "run", "--cluster", "safekeeper", "--workload", "set", "--nemesis", "partition-primary",
        "--nemesis-interval", "8", "--time", "30", "--settle", "2", "--store", str(store),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run = (store / "latest").resolve()
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    faults = [e for e in history if e["process"] == "nemesis" and e["type"] == "info"]
    starts = [e["time"] for e in faults if e["f"] == "start-partition"]
    stops = [e["time"] for e in faults if e["f"] == "stop-partition"]
    assert starts and stops, faults
    added = [e["time"] for e in history if e["type"] == "ok" and e.get("f") == "add"]
    # the fault is in place from its info on; a commit already past the quorum may still land
    window = (starts[0] + 2 * SECOND, stops[0])
    assert window[1] - window[0] > 2 * SECOND
    during = [t for t in added if window[0] < t < window[1]]
    after = [t for t in added if t > stops[0]]
    assert during == [], f"{len(during)} adds committed while n1 was cut off from every safekeeper"
    assert len(after) > 100, "commits did not resume after the partition healed"
    status = json.loads((run / "nodes" / "cluster-status.json").read_text())
    assert status["kind"] == "safekeeper" and status["term"] >= 1
