"""`harness export RUN --format edn` writes a run's history as Jepsen's, which `harness check`
reads back to the same verdict and the same anomalies (as Elle would read it)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import harness
from tests.runs_store import LOST, make_run


def test_a_run_exported_to_edn_checks_identically(tmp_path: Path) -> None:
    run = make_run(tmp_path / "results", "single-set-kill", "20261124T120000", lose=True)
    first = harness("check", str(run))
    assert first.returncode == 1, first.stdout + first.stderr
    exported = harness("export", str(run), "--format", "edn")
    assert exported.returncode == 0, exported.stderr
    edn = run / "history.edn"
    assert edn.read_text().startswith("{:index 0 ")
    again = harness("check", str(edn), "--workload", "set", "--out", str(tmp_path / "again"))
    assert again.returncode == 1, again.stdout + again.stderr
    ours = json.loads((run / "results.json").read_text())["checkers"]["set"]
    theirs = json.loads((tmp_path / "again" / "results.json").read_text())["checkers"]["set"]
    assert ours["anomaly_types"] == theirs["anomaly_types"] == ["lost"]
    assert [a["explanation"] for a in ours["anomalies"]] == [
        a["explanation"] for a in theirs["anomalies"]
    ]
    assert f"element {LOST} was lost" in ours["anomalies"][0]["explanation"]


def test_exporting_what_is_no_run_is_one_sentence(tmp_path: Path) -> None:
    result = harness("export", str(tmp_path / "nothing"))
    assert result.returncode == 254 and "neither a run folder" in result.stderr
