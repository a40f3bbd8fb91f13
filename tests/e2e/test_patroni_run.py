"""`harness run --cluster patroni` end to end: Patroni in strict quorum mode, as the Patroni
project's own Jepsen test runs it, its primary killed and switched over while clients write.
Patroni promises no acknowledged write is lost there: the run must be valid, each failover a new
timeline in the leader lane, the leader key followed in the polls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import harness, valid_run

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_a_quorum_patroni_cluster_killed_and_switched_over_loses_nothing(
    store: Path,
) -> None:
    results, history = valid_run(
        store, "--cluster", "patroni", "--patroni-sync", "quorum", "--ttl", "9",
        "--workload", "set,bank", "--nemesis", "kill-primary,switchover",
        "--nemesis-interval", "15", "--time", "60", "--seed", "0", timeout=1200,
    )  # fmt: skip
    faults = [e for e in history if e["process"] == "nemesis" and e["type"] == "info"]
    assert {e["f"] for e in faults} & {"start-kill", "start-switchover"}, faults
    leaders = results["checkers"]["cluster-state"]["leaders"]
    timelines = {s["term"] for s in leaders if s["nodes"]}
    assert len(timelines) >= 2 and {s["unit"] for s in leaders if s["nodes"]} == {"timeline"}
    run = (store / "latest").resolve()
    polls = [json.loads(line) for line in (run / "cluster.jsonl").read_text().splitlines()]
    holders = {p["nodes"]["zookeeper"]["holder"] for p in polls if "zookeeper" in p["nodes"]}
    assert len(holders - {None}) >= 2, holders  # the key moved with the primary


# The replication cut from 8 s to 46 s, the primary killed inside it from 13 s to 43 s: adds
# acknowledged from 8 s to 13 s are on the primary alone, and 30 s of silence is more than the
# failover takes (20 s of a 22.5 s kill with another cluster beside it). Alone all the same: a
# failover slower than the kill lets the killed primary take its key back, and nothing is lost
# to name.
REPLICATION_KILL = {
    "format": "harness-schedule",
    "version": 1,
    "cluster": "patroni",
    "faults": [
        {"start_s": 8.0, "stop_s": 46.0,
         "plan": {"fault": "partition", "shape": "replication", "grudge": None}},
        {"start_s": 13.0, "stop_s": 43.0,
         "plan": {"fault": "kill", "target": "primaries", "targets": None}},
    ],
}  # fmt: skip


@pytest.mark.alone
def test_an_asynchronous_primary_killed_while_cut_from_its_replicas_loses_acknowledged_writes(
    store: Path, tmp_path: Path
) -> None:
    """Patroni's default (`synchronous_mode` off) under `replication-kill`: the primary, cut off
    from its replicas but not from etcd or its clients, acknowledges adds no replica receives;
    killed, its key expires and a replica within `maximum_lag_on_failover` is promoted; back,
    it is rewound. Those adds are gone, and the set checker names them one by one."""
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(REPLICATION_KILL))
    result = harness(
        "run", "--cluster", "patroni", "--patroni-sync", "off", "--ttl", "9",
        "--workload", "set", "--schedule", str(schedule), "--time", "50", "--seed", "0",
        "--store", str(store), timeout=1200,
    )  # fmt: skip
    run = (store / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert result.returncode == 1, results
    found = results["checkers"]["set"]
    lost = [a for a in found["anomalies"] if a["type"] == "lost"]
    assert lost, found["anomaly_types"]
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    kills = [e for e in history if e["process"] == "nemesis" and e["f"] == "start-kill"]
    assert kills and "lost" in lost[0]["explanation"]
