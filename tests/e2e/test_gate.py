"""`harness gate` as CI runs it: the table on stdout, JUnit beside it, the worst verdict as exit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.e2e.conftest import harness
from tests.e2e.test_bad_input import assert_one_sentence
from tests.runs_store import make_run

pytestmark = pytest.mark.e2e


def results(valid: bool | str, **checkers: list[str]) -> dict:
    """A results.json as the pipeline writes it, for a run whose checkers found `checkers`."""
    return {
        "valid": valid,
        "verdict": {True: "valid", False: "invalid"}.get(valid, "unknown"),  # type: ignore[call-overload]
        "mode": "safekeeper",
        "checkers": {
            name: {
                "valid": not kinds,
                "anomaly_types": kinds,
                "anomalies": [{"type": k, "explanation": f"{k} explained"} for k in kinds],
            }
            for name, kinds in checkers.items()
        }
        | {"stats": {"valid": True, "anomaly_types": [], "duration_s": 5.2}},
        "history": {"events": 100},
    }


def test_gate_exits_with_the_worst_and_junit_names_the_failure(tmp_path: Path) -> None:
    store = tmp_path / "results"
    good = make_run(store, "single-set-none", "20261121T100000")
    (good / "results.json").write_text(json.dumps(results(True, set=[])))
    bad = make_run(store, "safekeeper-append-kill", "20261121T100100", seed=4)
    (bad / "results.json").write_text(json.dumps(results(False, append=["G1c", "lost-append"])))
    junit = tmp_path / "junit.xml"

    result = harness("gate", str(store), "--junit", str(junit))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "append: G1c; append: lost-append" in result.stdout
    assert "1 invalid" in result.stdout and "1 valid" in result.stdout
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    failure = cases["safekeeper-append-kill/20261121T100100"].find("failure")
    assert failure is not None and failure.get("message") == "append: G1c; append: lost-append"
    assert "G1c explained" in (failure.text or "")

    only_good = harness("gate", str(good))
    assert only_good.returncode == 0, only_good.stdout + only_good.stderr


@pytest.mark.parametrize("what", ["missing", "empty"])
def test_a_path_without_runs_is_one_sentence(tmp_path: Path, what: str) -> None:
    path = tmp_path / "nothing"
    if what == "empty":
        path.mkdir()
    assert str(path) in assert_one_sentence(harness("gate", str(path)))
