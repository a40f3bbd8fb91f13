"""The gate: a table of runs, JUnit XML naming each failing run and its anomalies, the worst."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from io import StringIO
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from core.errors import BadInput
from harness.gate import gate_paths, gate_runs, parse_required
from tests.runs_store import LOST, check, make_run


@pytest.fixture(scope="module")
def runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate") / "results"
    made = {
        "valid": make_run(root, "single-set-none", "20261121T100000"),
        "invalid": make_run(root, "single-set-kill", "20261121T100100", lose=True, seed=3),
        "unchecked": make_run(root, "single-set-none", "20261121T100200"),
    }
    check(spark, made["valid"])
    check(spark, made["invalid"])
    return made


def gate(runs: list[Path], junit: Path, errors: dict[Path, str] | None = None) -> tuple[int, str]:
    out = StringIO()
    code = gate_runs(runs, errors or {}, junit, "local[2]", Console(file=out, width=200))
    return code, out.getvalue()


def cases(junit: Path) -> dict[str, ET.Element]:
    root = ET.parse(junit).getroot()
    return {case.get("name", ""): case for case in root.iter("testcase")}


def test_all_valid_passes(runs: dict[str, Path], tmp_path: Path) -> None:
    code, out = gate([runs["valid"]], tmp_path / "j.xml")
    assert code == 0
    assert "single-set-none/20261121T100000" in out and "1 valid" in out
    (case,) = cases(tmp_path / "j.xml").values()
    assert case.find("failure") is None and case.find("error") is None


def test_an_anomaly_fails_the_gate_and_junit_names_run_and_anomaly(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    junit = tmp_path / "out" / "junit.xml"
    code, out = gate([runs["valid"], runs["invalid"]], junit)
    assert code == 1
    assert "set: lost" in out and "1 invalid" in out
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")
    failing = cases(junit)["single-set-kill/20261121T100100"]
    failure = failing.find("failure")
    assert failure is not None and failure.get("message") == "set: lost"
    assert f"element {LOST} was lost" in (failure.text or "")
    props = {p.get("name"): p.get("value") for p in failing.iter("property")}
    assert props["seed"] == "3" and props["verdict"] == "invalid"
    assert cases(junit)["single-set-none/20261121T100000"].find("failure") is None


def test_worst_verdict_wins(runs: dict[str, Path], tmp_path: Path) -> None:
    code, _ = gate([runs["valid"], runs["unchecked"]], tmp_path / "j.xml")
    assert code == 2
    error = cases(tmp_path / "j.xml")["single-set-none/20261121T100200"].find("error")
    assert error is not None and "not checked" in error.get("message", "")
    assert gate(list(runs.values()), tmp_path / "j.xml")[0] == 1
    crashed = {runs["valid"]: "Docker went away"}
    code, out = gate(list(runs.values()), tmp_path / "j.xml", crashed)
    assert code == 255 and "Docker went away" in out
    error = cases(tmp_path / "j.xml")["single-set-none/20261121T100000"].find("error")
    assert error is not None and error.get("message") == "Docker went away"


def test_paths_are_walked_for_runs(runs: dict[str, Path]) -> None:
    store = runs["valid"].parent.parent
    out = StringIO()
    code = gate_paths([store], None, "local[2]", Console(file=out, width=200))
    assert code == 1 and "3 runs" in out.getvalue()


def test_a_required_moment_the_run_never_reached_leaves_it_undecided(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """A valid run that never reached a moment says nothing of the code that moment exercises:
    with --require-moment, the gate holds it undecided."""
    run = tmp_path / "results" / "safekeeper-append-aimed" / "20261121T110000"
    shutil.copytree(runs["valid"], run)
    results = json.loads((run / "results.json").read_text())
    results["checkers"]["cluster-state"] = {
        "valid": True,
        "moments": [
            {"moment": "term-won", "reached": 2, "aimed": {"kill on new-leader": 1}},
            {"moment": "catch-up", "reached": 0, "aimed": {"pause on catching-up": 1}},
            {"moment": "rebuild", "reached": 0, "aimed": {}},
        ],
    }
    (run / "results.json").write_text(json.dumps(results))
    out = StringIO()
    console = Console(file=out, width=200)
    assert gate_runs([run], {}, None, "local[2]", console, {"term-won": 2, "catch-up": 1}) == 0
    assert gate_runs([run], {}, None, "local[2]", console, {"rebuild": 1}) == 2
    assert "did not reach rebuild (0 of 1)" in out.getvalue()
    assert gate_runs([run], {}, None, "local[2]", console, {"term-won": 3}) == 2
    assert parse_required(["term-won", "catch-up=3"]) == {"term-won": 1, "catch-up": 3}
    for wrong in ("=2", "catch-up=0", "catch-up=x"):
        with pytest.raises(BadInput, match="NAME=COUNT"):
            parse_required([wrong])


def with_coverage(
    source: Path, run: Path, nemesis: list[str], moments: list[dict], pairs: dict[str, int]
) -> Path:
    """A copy of a valid run as if it ran `nemesis` and reached these moments and pairs."""
    shutil.copytree(source, run)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(config | {"nemesis": nemesis}))
    results = json.loads((run / "results.json").read_text())
    results["checkers"]["cluster-state"] = {
        "valid": True,
        "moments": moments,
        "chains": {"chains": 2, "steps": {}, "pairs": pairs},
    }
    (run / "results.json").write_text(json.dumps(results))
    return run


def test_a_valid_run_whose_faults_reached_no_moment_is_undecided(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Faults too short for the kind to fail over: valid, yet it tested no failover, so the
    gate holds it undecided without being asked; a run without faults is not held so."""
    none = [{"moment": "leader-key-taken", "reached": 0, "aimed": {}}]
    short = with_coverage(runs["valid"], tmp_path / "a" / "patroni" / "1", ["pause-dcs"], none, {})
    quiet = with_coverage(runs["valid"], tmp_path / "b" / "patroni" / "2", ["none"], none, {})
    out = StringIO()
    console = Console(file=out, width=300)
    assert gate_runs([short], {}, None, "local[2]", console) == 2
    assert "reached none of the cluster's moments" in out.getvalue()
    assert gate_runs([quiet], {}, None, "local[2]", console) == 0
    once = [{"moment": "leader-key-taken", "reached": 1, "aimed": {}}]
    failed_over = with_coverage(runs["valid"], tmp_path / "c" / "patroni" / "3", ["kill"], once, {})
    assert gate_runs([failed_over], {}, None, "local[2]", console) == 0


def test_a_pair_of_moments_can_be_required(runs: dict[str, Path], tmp_path: Path) -> None:
    moments = [{"moment": "term-won", "reached": 3, "aimed": {}}]
    pairs = {"term-won:new-leader:kill > takeover:deposed:pause": 2}
    run = with_coverage(runs["valid"], tmp_path / "s" / "1", ["aimed"], moments, pairs)
    out = StringIO()
    console = Console(file=out, width=300)
    assert gate_runs([run], {}, None, "local[2]", console, {"term-won>takeover": 2}) == 0
    assert gate_runs([run], {}, None, "local[2]", console, {"takeover>term-won": 1}) == 2
    assert "did not reach takeover>term-won (0 of 1)" in out.getvalue()
    assert parse_required(["term-won>takeover=2"]) == {"term-won>takeover": 2}


def test_a_moment_no_kind_has_is_bad_input_naming_those_there_are() -> None:
    for wrong in ("no-such-moment", "term-won>no-such-moment"):
        with pytest.raises(BadInput, match="no cluster kind has a moment 'no-such-moment'") as e:
            parse_required([wrong])
        assert "term-won" in str(e.value) and "leader-key-taken" in str(e.value)
