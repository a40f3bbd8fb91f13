"""Availability figures: recovery after each heal, the longest stretch without an acknowledged
write, and the `--max-recovery` bound (a slow recovery names its fault; time under a later fault
does not count against the cluster)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from checkers import availability as plain
from checkers.availability import FinalReads, Window, analyse, covered, describe, sides
from checkers.reader import read_history
from checkers.spark.pipeline import analyze
from core.history import FINAL_READS_PROCESS as FINAL
from core.history import NEMESIS
from tests.unit.conftest import checks

GRUDGE = {"n1": ["n3", "n4", "n5"], "n2": ["n3", "n4", "n5"], "n3": ["n1", "n2"]}


def every(start: float, stop: float, step: float = 1.0) -> list[float]:
    out, t = [], start
    while t < stop:
        out.append(round(t, 6))
        t += step
    return out


def test_recovery_is_the_time_from_the_heal_to_the_next_acknowledged_write() -> None:
    writes = every(0, 3) + every(7.5, 20)
    result = analyse(writes, [Window("partition", 3, 6)], (0, 20))
    (window,) = result["windows"]
    assert window["recovery_s"] == 1.5 and window["first_write_s"] == 7.5
    assert result["worst_recovery_s"] == 1.5
    assert result["longest_gap_s"] == 5.5 and result["longest_gap"] == [2, 7.5]
    assert result["valid"] is True


def test_without_a_bound_a_cluster_that_never_recovers_is_reported_not_judged() -> None:
    result = analyse(every(0, 10), [Window("kill", 10, 12)], (0, 60))
    assert result["valid"] is True
    assert result["windows"][0]["recovery_s"] is None
    assert result["never_recovered"] is True and result["worst_recovery_s"] is None
    assert result["longest_gap_s"] == 51


def test_a_cluster_that_never_recovers_breaks_the_bound_and_names_the_fault() -> None:
    windows = [Window("partition", 10, 12, {"grudge": GRUDGE})]
    result = analyse(every(0, 10), windows, (0, 60), max_recovery=30)
    assert result["valid"] is False and result["anomaly_types"] == ["slow-recovery"]
    (anomaly,) = result["anomalies"]
    assert "the partition (n1 n2 | n3 n4 n5) healed at 12.0 s" in anomaly["explanation"]
    assert "no write was acknowledged after it" in anomaly["explanation"]
    assert "48.0 s free of faults" in anomaly["explanation"]


def test_a_fault_healed_just_before_the_writes_end_is_no_alarm() -> None:
    """test_churn's end at seed 0: the last fault healed 2 s before the writes ended, too soon
    for any write. Within the bound that is neither a recovery nor a failure to recover."""
    windows = [Window("kill", 50, 55), Window("partition", 230, 238)]
    writes = every(0, 50) + every(57, 230)
    result = analyse(writes, windows, (0, 240), max_recovery=30)
    assert result["valid"] is True and result["never_recovered"] is False
    assert result["worst_recovery_s"] == 2
    last = result["windows"][1]
    assert last["recovery_s"] is None and last["unsettled"] is True
    assert last["note"] == "the writes ended 2.0 s after it healed, within the 30 s bound"


def test_the_same_end_past_the_bound_is_a_failure_to_recover() -> None:
    windows = [Window("partition", 200, 205)]
    result = analyse(every(0, 200), windows, (0, 240), max_recovery=30)
    assert result["never_recovered"] is True and result["anomaly_types"] == ["slow-recovery"]


def test_time_under_a_later_fault_does_not_count_against_the_recovery() -> None:
    """Healed at 10, cut off again from 12 to 40, writing again at 41: 31 s to the first write,
    of which only 3 s were free of faults."""
    windows = [Window("partition", 5, 10), Window("partition", 12, 40)]
    writes = every(0, 5) + every(41, 60)
    result = analyse(writes, windows, (0, 60), max_recovery=30)
    first = result["windows"][0]
    assert first["recovery_s"] == 31 and first["free_s"] == 3
    assert result["windows"][1]["recovery_s"] == 1
    assert result["valid"] is True


def test_a_fault_healed_inside_another_has_no_recovery_of_its_own() -> None:
    """`composite`: a kill from 12 to 18 inside a partition from 10 to 30; writes again at 31.
    The cluster is left alone only when the partition heals: its recovery is the one."""
    windows = [Window("partition", 10, 30), Window("kill", 12, 18)]
    writes = every(0, 10) + every(31, 60)
    result = analyse(writes, windows, (0, 60), max_recovery=10)
    inner = next(r for r in result["windows"] if r["fault"] == "kill")
    assert inner["recovery_s"] is None and inner["inside"] == "partition"
    assert result["worst_recovery_s"] == 1 and result["valid"] is True


def test_the_seed0_shape_faults_every_ten_seconds_and_no_write_for_400_s() -> None:
    """The users' run: from 200 s on no write committed while faults came and went."""
    windows = [Window("partition", t, t + 8) for t in range(10, 600, 16)]
    writes = [t for t in every(0, 200, 0.5) if not any(w.start <= t < w.end for w in windows)]
    result = analyse(writes, windows, (0, 600), max_recovery=30)
    assert result["anomaly_types"] == ["slow-recovery"]
    assert result["longest_gap_s"] > 400
    assert result["last_write_s"] < 200


def test_a_stall_with_no_fault_in_place_is_a_write_stall() -> None:
    writes = every(0, 10) + every(70, 80)
    result = analyse(writes, [], (0, 80), max_recovery=30)
    assert result["anomaly_types"] == ["write-stall"]
    assert "from 9.0 s to 70.0 s" in result["anomalies"][0]["explanation"]
    assert analyse(writes, [], (0, 80))["valid"] is True


def test_a_window_healed_after_the_writes_ended_is_not_measured() -> None:
    result = analyse(every(0, 58), [Window("pause", 55, 61)], (0, 60), max_recovery=10)
    assert result["windows"][0]["note"] == "the run's writes had ended"
    assert result["worst_recovery_s"] is None and result["valid"] is True


def test_a_run_without_writes_has_no_figures() -> None:
    result = analyse([], [Window("kill", 1, 2)], None, max_recovery=5)
    assert result["valid"] is True and result["windows"] == []


def test_covered_time_merges_overlapping_faults() -> None:
    windows = [Window("a", 0, 10), Window("b", 5, 15), Window("c", 20, 30)]
    assert covered(windows, 2, 25) == 13 + 5
    assert covered(windows, 15, 20) == 0


def test_faults_are_named_by_their_sides_or_targets() -> None:
    assert sides(GRUDGE) == [["n1", "n2"], ["n3", "n4", "n5"]]
    ring = {"n1": ["n3"], "n2": ["n4"], "n3": ["n1"], "n4": ["n2"]}
    assert len(sides(ring)) == 1
    shaped = Window("partition", 0, 1, '{"shape": "majorities-ring", "grudge": {"n1": ["n3"]}}')
    assert describe(shaped) == "the partition (n1 | n3)"
    assert describe(Window("partition", 0, 1, {"shape": "ring", "grudge": ring})) == (
        "the partition (ring)"
    )
    assert describe(Window("kill", 0, 1, {"targets": ["n2"]})) == "the kill (n2)"
    assert describe(Window("clock", 0, 1, None)) == "the clock"


def tagged(history: Path) -> list[dict[str, Any]]:
    """The plain operations of a one-workload history, its client operations tagged `append`
    as the pipeline tags them."""
    return [
        op | {"workload": op["workload"] or ("append" if op["process"] != NEMESIS else None)}
        for op in read_history(history)
    ]


def test_the_pipeline_reads_writes_and_faults_from_the_history(
    spark: SparkSession, write_history: Callable[..., Path], tmp_path: Path
) -> None:
    s = 1_000_000_000
    events: list[dict[str, Any]] = []

    def op(t: float, f: str, value: Any, type_: str = "ok", process: int = 0) -> None:
        events.append(
            {"time": int(t * s), "process": process, "type": "invoke", "f": f, "value": value}
        )
        events.append({"time": int(t * s) + 1000, "process": process, "type": type_, "f": f,
                       "value": value})  # fmt: skip

    op(0, "txn", [["append", 1, 1]])
    op(1, "txn", [["r", 1, None]])  # a read: no write
    events.append({"time": 2 * s, "process": "nemesis", "type": "info", "f": "start-kill",
                   "value": {"targets": ["n1"]}})  # fmt: skip
    events.append({"time": 4 * s, "process": "nemesis", "type": "info", "f": "stop-kill",
                   "value": {}})  # fmt: skip
    op(5, "txn", [["append", 1, 2]], "fail")
    op(50, "txn", [["r", 1, None], ["append", 1, 3]])
    op(60, "txn", [["append", 1, 4]])
    for i, e in enumerate(events):
        e["index"] = i
    history = write_history(events)
    result = analyze(spark, history, tmp_path / "out", checks("append"), {"availability": {
        "max_recovery": 30}})  # fmt: skip
    availability = result["checkers"]["availability"]
    assert plain.check(tagged(history), max_recovery=30) == availability
    assert availability["anomaly_types"] == ["slow-recovery"]
    (window,) = availability["windows"]
    assert window["fault"] == "kill" and round(window["recovery_s"]) == 46
    assert "the kill (n1) healed at 4.0 s" in availability["anomalies"][0]["explanation"]
    assert result["valid"] is False


def test_final_reads_all_refused_are_no_final_read_whatever_the_bound() -> None:
    """The shape of `--bug skip-fsync` under power: the safekeepers never start again."""
    refused = FinalReads("append", 58, 0, 126.0, 186.5)
    result = analyse(every(0, 80), [Window("power", 82, 94)], (0, 120), final_reads=[refused])
    assert result["anomaly_types"] == ["no-final-read"] and result["valid"] is False
    (anomaly,) = result["anomalies"]
    assert anomaly["workload"] == "append"
    assert (
        "none of the 58 final reads of append succeeded (126.0 s to 186.5 s)"
        in (anomaly["explanation"])
    )
    assert "none of the 80 acknowledged writes can be shown durable" in anomaly["explanation"]


def test_one_final_read_answered_or_nothing_acknowledged_is_no_anomaly() -> None:
    answered = FinalReads("append", 3, 1, 126.0, 129.0)
    assert analyse(every(0, 80), [], (0, 120), final_reads=[answered])["valid"] is True
    refused = FinalReads("set", 58, 0, 126.0, 186.5)
    assert analyse([], [], (0, 120), final_reads=[refused])["valid"] is True


def test_the_pipeline_finds_final_reads_all_refused(
    spark: SparkSession, write_history: Callable[..., Path], tmp_path: Path
) -> None:
    s = 1_000_000_000
    events: list[dict[str, Any]] = []

    def op(t: float, f: str, value: Any, type_: str, process: int) -> None:
        events.append(
            {"time": int(t * s), "process": process, "type": "invoke", "f": f, "value": value}
        )
        events.append({"time": int(t * s) + 1000, "process": process, "type": type_, "f": f,
                       "value": value, "error": None if type_ == "ok" else "refused"})  # fmt: skip

    op(0, "txn", [["append", 1, 1]], "ok", 0)
    op(1, "txn", [["append", 1, 2]], "ok", 1)
    op(10, "txn", [["r", 1, None]], "fail", FINAL)
    op(11, "txn", [["r", 1, None]], "info", FINAL)
    op(12, "txn", [["r", 1, None]], "fail", FINAL + 1)
    for i, e in enumerate(events):
        e["index"] = i
    history = write_history(events)
    result = analyze(spark, history, tmp_path / "out", checks("append"), {})
    availability = result["checkers"]["availability"]
    assert plain.check(tagged(history)) == availability
    assert availability["anomaly_types"] == ["no-final-read"], availability["anomalies"]
    assert "none of the 3 final reads" in availability["anomalies"][0]["explanation"]
    assert result["valid"] is False
