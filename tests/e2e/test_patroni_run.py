"""`harness run --cluster patroni` end to end: Debian's Patroni with a strict synchronous standby,
its primary killed and switched over while clients write. Patroni promises no acknowledged
write is lost there: the run must be valid, each failover a new timeline in the leader lane, the
leader key followed in the polls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import valid_run

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_a_synchronous_patroni_cluster_killed_and_switched_over_loses_nothing(
    store: Path,
) -> None:
    results, history = valid_run(
        store, "--cluster", "patroni", "--patroni-sync", "on", "--ttl", "9",
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
