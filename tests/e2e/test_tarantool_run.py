"""`harness run --cluster tarantool` end to end on real Tarantool 2.6.0: the leader is cut off, the
controller fails over, the run is checked in the confirm/rollback mode and reported. Whether the
run is valid is Tarantool's business (FINDINGS.md); that the harness completes the run, sees the
failover and names what it found is ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import harness

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_a_partitioned_tarantool_run_fails_over_and_is_checked(store: Path) -> None:
    result = harness(
        "run", "--cluster", "tarantool", "--instances", "3", "--workload", "set",
        "--nemesis", "partition-primary", "--time", "30", "--settle", "2", "--seed", "0",
        "--store", str(store),
    )  # fmt: skip
    run = (store / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert (result.returncode == 0) == (results["valid"] is True)
    assert results["mode"] == "confirm-rollback"
    config = json.loads((run / "config.json").read_text())
    assert config["versions"]["tarantool"].startswith("2.6.0")
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    served = {e["node"] for e in history if e["type"] == "ok" and e["process"] != "nemesis"}
    assert len(served) >= 2, f"every write went through {served}: no failover"
    controller = (run / "nodes" / "n3" / "harness" / "controller.log").read_text()
    assert "promoting" in controller
    checked = results["checkers"]["set"]
    for anomaly in checked["anomalies"]:  # each named, explained, with its operations
        assert anomaly["type"] in checked["anomaly_types"]
        assert anomaly["explanation"] and anomaly["ops"]
    # acknowledged adds survive (elements only a dirty read showed may not)
    assert checked["lost_acknowledged_count"] == 0, checked["anomalies"]
    assert (run / "report.html").stat().st_size > 10_000
