"""`harness run --cluster streaming` end to end: plain Postgres streaming replication under
synchronous replication, reads served by the hot standbys, and the primary failed over by the
`promote` fault as an operator would. With no client cancelling, no acknowledged write may be lost:
the run must be valid, its promotions seen as new timelines in the leader lane."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.history import FINAL_READS_PROCESS
from tests.e2e.conftest import valid_run

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_a_synchronous_cluster_failed_over_by_an_operator_loses_nothing(store: Path) -> None:
    results, history = valid_run(
        store, "--cluster", "streaming", "--replication", "sync", "--read-from", "replicas",
        "--isolation", "repeatable-read", "--workload", "set,bank", "--nemesis", "promote",
        "--nemesis-interval", "8", "--time", "45", "--seed", "0",
    )  # fmt: skip
    promoted = [
        e["value"]
        for e in history
        if e["process"] == "nemesis" and e["f"] == "start-promote" and e["type"] == "info"
    ]
    assert promoted and all(p.get("promoted") for p in promoted), promoted
    # the workers' reads were served by their standbys (the final reads by the primary)
    reads = {
        e["node"]
        for e in history
        if e["type"] == "ok" and e["f"] == "read" and e["process"] < FINAL_READS_PROCESS
    }
    assert reads and reads <= {"n2", "n3"}, reads
    leaders = results["checkers"]["cluster-state"]["leaders"]
    timelines = {s["term"] for s in leaders if s["nodes"]}
    assert len(timelines) >= 2 and {s["unit"] for s in leaders if s["nodes"]} == {"timeline"}
