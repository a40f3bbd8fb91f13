"""`harness check --mode`: the run's contract (or the one asked for) decides what the append and
set checkers hold a history to, and results.json says which. Runs the command, as a user would."""

from __future__ import annotations

import json
from pathlib import Path

from checkers.rollback import rolled_back
from core.contract import Contract
from tests.e2e.conftest import harness
from tests.e2e.test_bad_input import assert_one_sentence

ROLLED_BACK = "rolled back: the quorum was not collected in time"
CONFIRM_ROLLBACK = Contract.CONFIRM_ROLLBACK.value


def write_set_history(path: Path) -> Path:
    """An add told it was rolled back, and a later read that shows its element."""
    events = [
        {"process": 0, "type": "invoke", "f": "add", "value": 1},
        {"process": 0, "type": "fail", "f": "add", "value": 1, "error": ROLLED_BACK},
        {"process": 1, "type": "invoke", "f": "read", "value": None},
        {"process": 1, "type": "ok", "f": "read", "value": [1]},
    ]
    lines = [json.dumps({"index": i, "time": i * 1_000_000, **e}) for i, e in enumerate(events)]
    path.write_text("\n".join(lines) + "\n")
    return path


def checked(out: Path) -> tuple[str, list[str]]:
    results = json.loads((out / "results.json").read_text())
    return results["mode"], results["checkers"]["set"]["anomaly_types"]


def test_the_contracts_and_their_old_names() -> None:
    assert [c.value for c in Contract] == ["durable", CONFIRM_ROLLBACK]
    assert Contract.parse("safekeeper") is Contract.DURABLE
    assert rolled_back(ROLLED_BACK) and rolled_back("40001: could not serialize access")
    assert not rolled_back("40003: statement completion unknown") and not rolled_back(None)


def test_a_bare_history_is_checked_in_the_mode_asked_for(tmp_path: Path) -> None:
    history = write_set_history(tmp_path / "h.jsonl")
    out = tmp_path / "out"
    result = harness(
        "check", str(history), "--workload", "set", "--mode", CONFIRM_ROLLBACK, "--out", str(out)
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "set: resurrected-rollback" in result.stdout
    assert checked(out) == (CONFIRM_ROLLBACK, ["resurrected-rollback"])


def test_a_run_is_checked_in_its_own_mode_unless_told_otherwise(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_set_history(run / "history.jsonl")
    config = {"workloads": ["set"], "cluster_options": {"mode": CONFIRM_ROLLBACK}}
    (run / "config.json").write_text(json.dumps(config))
    result = harness("check", str(run))
    assert result.returncode == 1, result.stdout + result.stderr
    assert checked(run) == (CONFIRM_ROLLBACK, ["resurrected-rollback"])
    result = harness("check", str(run), "--mode", "durable")
    assert result.returncode == 1, result.stdout + result.stderr
    assert checked(run) == ("durable", ["unexpected"])


def test_an_unknown_mode_is_one_sentence(tmp_path: Path) -> None:
    history = write_set_history(tmp_path / "h.jsonl")
    result = harness("check", str(history), "--workload", "set", "--mode", "bogus")
    text = assert_one_sentence(result)
    assert "bogus" in text and CONFIRM_ROLLBACK in text
