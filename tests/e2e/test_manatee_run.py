"""`harness run --cluster manatee` end to end: three Postgres peers whose sitters keep their roles
in a real ZooKeeper ensemble (Debian's), the primary killed, the sync declaring the next
generation. Whether the run is valid is the seed's business (FINDINGS.md); that the harness
deploys the kind, sees the new generation, and checks and reports the run is ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.polls import COORDINATION
from tests.e2e.conftest import harness

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_a_manatee_run_with_its_primary_killed_reaches_a_new_generation(store: Path) -> None:
    result = harness(
        "run", "--cluster", "manatee", "--workload", "set,append", "--nemesis", "kill-primary",
        "--nemesis-interval", "15", "--time", "60", "--seed", "0", "--store", str(store),
        timeout=1500,  # the first run on a machine builds the kind's image
    )  # fmt: skip
    run = (store / "latest").resolve()
    assert result.returncode in (0, 1), result.stdout + result.stderr
    results = json.loads((run / "results.json").read_text())
    assert (result.returncode == 0) == (results["valid"] is True)
    polls = [json.loads(line) for line in (run / "cluster.jsonl").read_text().splitlines()]
    generations = {s.get("generation") for p in polls for s in (p.get("nodes") or {}).values()}
    assert max(g for g in generations if g) >= 2, "no new generation seen"
    # ZooKeeper's cluster state is polled too, and the sitters keep seed 004's rules for it
    states = [
        p["nodes"][COORDINATION]["cluster_state"] for p in polls if COORDINATION in p["nodes"]
    ]
    assert max(s["generation"] for s in states) >= 2
    rules = {"generation-backwards", "generation-rewritten", "takeover-by-outsider",
             "init-wal-backwards", "primary-is-sync"}  # fmt: skip
    assert not rules & set(results["checkers"]["cluster-state"]["anomaly_types"])
    leaders = results["checkers"]["cluster-state"]["leaders"]
    assert len({(tuple(s["nodes"]), s["term"]) for s in leaders if s["nodes"]}) >= 2
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    kills = [e for e in history if e["process"] == "nemesis" and e["f"] == "start-kill"]
    assert kills and any(e["type"] == "info" and e["value"].get("targets") for e in kills)
    sitters = "".join(p.read_text() for p in (run / "nodes").glob("n*/harness/sitter.log"))
    assert "declared generation 2" in sitters
    assert (run / "nodes" / "n4" / "harness" / "zookeeper.log").stat().st_size > 0
    assert (run / "report.html").stat().st_size > 10_000
