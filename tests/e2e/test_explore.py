"""`harness explore` end to end on the safekeeper cluster: one short run (the budget is spent
by the first), aimed at the chains chosen for an empty corpus; the run is valid, its
config.json holds the chains it was given, its aimed faults strike them in turn, results.json
and the report's Moments and Chains tables count the strikes, the corpus under the store keeps
what it reached, and the output ends with the coverage over time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import harness

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_an_exploration_runs_aimed_chains_and_keeps_what_they_reached(store: Path) -> None:
    result = harness(
        "explore", "--cluster", "safekeeper", "--workload", "set", "--time", "40",
        "--settle", "2", "--budget", "0.5", "--store", str(store),
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "run 1 (seed 0)" in out and "coverage over time" in out, out[-3000:]
    (corpus_path,) = (store / "explore").iterdir()
    corpus = json.loads(corpus_path.read_text())
    (row,) = corpus["runs"]
    assert row["verdict"] == "valid" and row["seed"] == 0, row
    run = Path(row["run"])
    config = json.loads((run / "config.json").read_text())
    assert config["nemesis"] == ["aimed"] and len(config["chains"]) >= 2, config
    chains = json.loads((run / "results.json").read_text())["checkers"]["cluster-state"]["chains"]
    assert chains["chains"] >= 1 and chains["steps"], chains  # at least one step struck
    assert corpus["steps"] == chains["steps"] and corpus["pairs"] == chains["pairs"]
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    # the chains, in turn: drawn ones (aimed at a moment) and seeds' histories (partitions
    # placed as the cluster elects), each started as its fault
    started = [
        e["value"]
        for e in history
        if e["process"] == "nemesis" and e["type"] == "invoke" and e["f"].startswith("start-")
    ]
    given = [c.get("moment") or c["history"] for c in config["chains"]]
    assert [s.get("moment") or s.get("shape") for s in started] == given[: len(started)]
    # the first chain's first step struck, and the Chains table names it by its step
    first = chains["tried"][0]["steps"][0]
    assert "(not reached)" not in first, chains
    page = (run / "report.html").read_text()
    assert '<h2 id="moments">Moments</h2>' in page
    assert '<h2 id="chains">Chains</h2>' in page and first in page
    # an aimed fault that struck: the Moments table names it by fault, role and how the moment
    # was brought about
    aimed = [e["value"] for e in history if e["f"] == "start-aimed" and e["type"] == "info"]
    if struck := next((v for v in aimed if v.get("reached") and v.get("strike")), None):
        results = json.loads((run / "results.json").read_text())
        table = {m["moment"]: m for m in results["checkers"]["cluster-state"]["moments"]}
        key = f"{struck['strike']['fault']} on {struck['role']}, "
        (named,) = [k for k in table[struck["moment"]]["aimed"] if k.startswith(key)]
        assert named in page
    for pair in chains["pairs"]:
        assert pair.replace(">", "&gt;") in page
    assert "aimed steps reached:" in out and "moments reached:" in out
