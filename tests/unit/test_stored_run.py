"""A run stored before the test plan existed checks as it did: `harness check` rebuilds the plan
from its config.json as it is and gives the same verdict and the same anomalies.

The run (tests/data/stored-run-ack-before-quorum) is `harness run --bug ack-before-quorum
--nemesis kill-primary --nemesis-interval 6 --time 40 --workload bank,append,set` on the
safekeeper cluster, made by commit 4ae3223: its history records no `write` on invocations and
its polls no record types, its config names the contract nowhere; expected.json holds what that
commit's `harness check` said of it.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from core.contract import Contract
from tests.e2e.conftest import harness

STORED = Path(__file__).parent.parent / "data" / "stored-run-ack-before-quorum"


def test_a_run_stored_before_the_plan_checks_as_it_did(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(STORED, run)
    history = run / "history.jsonl.gz"
    (run / "history.jsonl").write_bytes(gzip.decompress(history.read_bytes()))
    history.unlink()
    expected = json.loads((run / "expected.json").read_text())

    result = harness("check", str(run))

    assert result.returncode == 1, result.stdout + result.stderr
    results = json.loads((run / "results.json").read_text())
    assert results["verdict"] == expected["verdict"] == "invalid"
    assert Contract.parse(results["mode"]) is Contract.parse(expected["mode"])
    # the logs checker came after it; the run kept no daemon's log to read
    assert set(results["checkers"]) == set(expected["checkers"]) | {"logs"}
    assert results["checkers"]["logs"]["valid"] and results["checkers"]["logs"]["files_read"] == 0
    for name, was in expected["checkers"].items():
        now = results["checkers"][name]
        assert now["valid"] == was["valid"], name
        assert now["anomaly_types"] == was["anomaly_types"], name
        explained = sorted(a.get("explanation", "") for a in now["anomalies"])
        assert explained == was["anomalies"], name
    assert expected["checkers"]["cluster-state"]["anomaly_types"] == [
        "acknowledged-write-beyond-quorum",
        "lost-acknowledged-write",
    ]
