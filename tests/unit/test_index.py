"""The index of runs: found in the store, read by the Spark job, one row per run."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from checkers.spark.runs_index import build_index, find_runs, started_at
from core.errors import BadInput
from tests.runs_store import LOST, check, make_run


@pytest.fixture(scope="module")
def store(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid run, an invalid one (an acknowledged add lost), one never checked, one whose
    results.json is cut short, in a store whose path has a space; `latest` links to one."""
    root = tmp_path_factory.mktemp("index") / "my results"
    check(spark, make_run(root, "single-set-none", "20261121T100000"))
    check(
        spark,
        make_run(
            root,
            "safekeeper-set-kill",
            "20261121T110000",
            lose=True,
            cluster="safekeeper",
            cluster_options={"mode": "confirm-rollback", "bug": "ack-before-quorum"},
            nemesis=["kill"],
            seed=7,
        ),
    )
    make_run(root, "single-set-none", "20261121T120000-1")
    broken = make_run(root, "single-set-none", "20261121T130000")
    (broken / "results.json").write_text('{"valid": tru')
    os.symlink("single-set-none/20261121T130000", root / "latest")
    (root / "notes").mkdir()
    return root


def test_every_run_once_and_nothing_else(store: Path) -> None:
    runs = find_runs([store, store / "latest", store / "single-set-none"])
    assert sorted(r.relative_to(store.resolve()).as_posix() for r in runs) == [
        "safekeeper-set-kill/20261121T110000",
        "single-set-none/20261121T100000",
        "single-set-none/20261121T120000-1",
        "single-set-none/20261121T130000",
    ]


@pytest.mark.parametrize("where", ["missing", "notes", "file"])
def test_a_path_without_runs_is_bad_input(store: Path, where: str) -> None:
    path = {"missing": store / "nope", "notes": store / "notes"}.get(where)
    if path is None:
        path = store / "single-set-none" / "20261121T100000" / "config.json"
    with pytest.raises(BadInput, match=str(path.name)):
        find_runs([path])


def test_rows_say_what_ran_and_what_was_found(spark: SparkSession, store: Path) -> None:
    rows = {r.key: r for r in build_index(spark, find_runs([store]))}
    assert [r.key for r in build_index(spark, find_runs([store]))] == list(rows)  # oldest first
    assert list(rows) == [
        "single-set-none/20261121T100000",
        "safekeeper-set-kill/20261121T110000",
        "single-set-none/20261121T120000-1",
        "single-set-none/20261121T130000",
    ]
    valid = rows["single-set-none/20261121T100000"]
    assert (valid.verdict, valid.checked, valid.exit_code, valid.findings) == ("valid", True, 0, [])
    assert (valid.cluster, valid.workloads, valid.nemesis, valid.seed) == (
        "single",
        "set",
        "none",
        0,
    )
    assert valid.started == datetime(2026, 11, 21, 10, 0, 0)
    assert valid.duration_s is not None and valid.events == 14
    assert valid.longest_gap_s is not None and valid.recovery == ""  # no fault, no recovery

    bad = rows["safekeeper-set-kill/20261121T110000"]
    assert (bad.verdict, bad.exit_code, bad.mode, bad.seed) == ("invalid", 1, "confirm-rollback", 7)
    assert bad.options == {"bug": "ack-before-quorum"}
    assert [(f.checker, f.type, f.count) for f in bad.findings] == [("set", "lost", 1)]
    assert f"element {LOST} was lost" in bad.findings[0].examples[0]
    assert bad.summary == "set: lost"

    unchecked = rows["single-set-none/20261121T120000-1"]
    assert (unchecked.verdict, unchecked.checked, unchecked.exit_code) == ("unknown", False, 2)
    assert "not checked" in unchecked.note
    broken = rows["single-set-none/20261121T130000"]
    assert (broken.verdict, broken.exit_code) == ("unknown", 2)
    assert "unreadable" in broken.note


def test_a_folder_not_named_by_its_start_is_dated_by_its_files(tmp_path: Path) -> None:
    run = make_run(tmp_path, "t", "copied")
    assert started_at(run) == datetime.fromtimestamp((run / "config.json").stat().st_mtime)
    assert started_at(tmp_path / "t" / "20261121T101500-2") == datetime(2026, 11, 21, 10, 15)


def test_no_runs_no_spark_job(spark: SparkSession) -> None:
    assert build_index(spark, []) == []


def test_a_run_that_never_recovered_says_so(spark: SparkSession, tmp_path: Path) -> None:
    """The gate's recovery column: the worst recovery after a heal, or `never`."""
    run = make_run(tmp_path, "safekeeper-set-kill", "20261121T100000")
    check(spark, run)
    results = json.loads((run / "results.json").read_text())
    availability = results["checkers"]["availability"]
    availability |= {"worst_recovery_s": 4.25, "never_recovered": False}
    (run / "results.json").write_text(json.dumps(results))
    (row,) = build_index(spark, [run])
    assert (row.worst_recovery_s, row.recovery) == (4.25, "4.2")
    availability |= {"worst_recovery_s": None, "never_recovered": True}
    (run / "results.json").write_text(json.dumps(results))
    (row,) = build_index(spark, [run])
    assert row.recovery == "never" and row.to_json()["never_recovered"] is True
