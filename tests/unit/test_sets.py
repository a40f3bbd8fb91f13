"""The set checker: each anomaly in a crafted history, beside a near miss that must pass.

Operations are drawn as intervals in ms; each history holds the anomaly for element 1 and the
near miss for element 2 (and more where a kind has several faces), so one check covers both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame

from checkers import sets
from checkers.spark import sets as fed_sets
from core.contract import Contract
from core.errors import BadInput
from tests.unit.conftest import both_ways

WriteOps = Callable[..., tuple[Path, list[int]]]
OpsOf = Callable[[Path], DataFrame]


def add(process: int, element: int, start: int, end: int, kind: str | None = "ok") -> dict:
    return {
        "process": process,
        "f": "add",
        "value": element,
        "type": kind,
        "start": start,
        "end": end,
    }


def read(process: int, start: int, end: int, elements: list[int]) -> dict:
    return {
        "process": process,
        "f": "read",
        "value": None,
        "result": elements,
        "type": "ok",
        "start": start,
        "end": end,
    }


def run(write_ops: WriteOps, ops_of: OpsOf, ops: list[dict]) -> tuple[dict[str, Any], list[int]]:
    path, indices = write_ops(ops)
    return both_ways(sets.check, fed_sets.check, ops_of(path), path), indices


def of_kind(result: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [a for a in result["anomalies"] if a["type"] == kind]


def op_indices(anomaly: dict[str, Any]) -> list[int]:
    return [op["invoke_index"] for op in anomaly["ops"]]


def test_lost_and_a_read_concurrent_with_the_add(write_ops: WriteOps, ops_of: OpsOf) -> None:
    result, ix = run(
        write_ops,
        ops_of,
        [
            add(0, 1, 0, 10),
            read(1, 20, 30, [1]),
            add(0, 2, 35, 60),  # near miss: read 40-50 begins before this add is acknowledged
            read(1, 40, 50, []),
            read(1, 70, 80, [2]),
        ],
    )
    add1, seen, _, missed, _ = ix
    assert result["valid"] is False
    assert result["anomaly_types"] == ["lost"]
    (lost,) = of_kind(result, "lost")
    assert lost["explanation"].startswith("element 1 was lost")
    assert f"its add at index {add1}" in lost["explanation"]
    assert f"the read at index {seen}" in lost["explanation"]
    assert f"yet the read at index {missed}" in lost["explanation"]
    assert "and 1 later read do not contain it" in lost["explanation"]
    assert op_indices(lost) == [add1, seen, missed]
    assert (result["lost_count"], result["stable_count"], result["stale_count"]) == (1, 1, 0)
    assert result["lost_acknowledged_count"] == 1


def test_an_unknown_add_a_read_showed_then_lost_is_lost_but_not_acknowledged(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    result, (add1, seen, missed) = run(
        write_ops,
        ops_of,
        [add(0, 1, 0, 10, "info"), read(1, 5, 8, [1]), read(1, 20, 30, [])],
    )
    (lost,) = of_kind(result, "lost")
    assert f"its add at index {add1} being unknown" in lost["explanation"]
    assert op_indices(lost) == [add1, seen, missed]
    assert (result["lost_count"], result["lost_acknowledged_count"]) == (1, 0)


def test_lost_without_ever_being_read(write_ops: WriteOps, ops_of: OpsOf) -> None:
    result, (add1, _, _, missed) = run(
        write_ops,
        ops_of,
        [add(0, 1, 0, 10), add(2, 3, 0, 5, "info"), read(1, 2, 4, []), read(1, 20, 30, [])],
    )
    (lost,) = of_kind(result, "lost")
    assert "element 1 was lost" in lost["explanation"]
    assert "no read ever contained it" in lost["explanation"]
    assert lost["explanation"].endswith(
        f"yet the read at index {missed} (invoked at 0.020 s) does not contain it"
    )
    assert op_indices(lost) == [add1, missed]
    # An unknown add that no read shows is not lost: it may never have happened.
    assert result["lost_count"] == 1 and result["known_count"] == 1


def test_stale_reports_the_worst_read_and_spares_concurrent_ones(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    result, ix = run(
        write_ops,
        ops_of,
        [
            add(0, 1, 0, 10),
            add(2, 2, 15, 35),  # near miss: only the read at 20-30, concurrent with it, misses 2
            read(1, 20, 30, [1]),
            read(3, 32, 34, [1]),
            read(1, 40, 50, [1, 2]),
            read(3, 45, 47, [2]),  # misses 1, 35 ms after 1 was acknowledged
            read(1, 60, 70, [1, 2]),
        ],
    )
    add1, _, _, _, _, worst, _ = ix
    assert result["valid"] is True
    assert result["anomaly_types"] == ["stale"]
    (stale,) = of_kind(result, "stale")
    assert stale["explanation"].startswith("element 1 was known from 0.010 s")
    assert f"its add at index {add1} was acknowledged" in stale["explanation"]
    assert f"the read at index {worst}, invoked at 0.045 s (35.0 ms later)" in stale["explanation"]
    assert op_indices(stale) == [add1, worst]
    assert result["worst_stale"] == {"element": 1, "staleness_ms": 35.0, "read_index": worst}
    assert (result["stale_count"], result["stable_count"], result["lost_count"]) == (1, 1, 0)


def test_stale_after_a_read_showed_the_element_before_its_add_was_acknowledged(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    result, (add1, seen, missed, _) = run(
        write_ops,
        ops_of,
        [add(0, 1, 0, 100), read(1, 10, 20, [1]), read(1, 30, 40, []), read(1, 110, 120, [1])],
    )
    (stale,) = of_kind(result, "stale")
    assert f"the read at index {seen} had it at 0.020 s" in stale["explanation"]
    assert op_indices(stale) == [add1, missed]


def test_never_read(write_ops: WriteOps, ops_of: OpsOf) -> None:
    result, (add1, _, _) = run(
        write_ops,
        ops_of,
        [
            add(0, 1, 0, 10),
            add(2, 2, 0, 3),  # near miss: the read begins after 2 is acknowledged and has it
            read(1, 5, 8, [2]),
        ],
    )
    assert result["valid"] is True
    assert result["anomaly_types"] == ["never-read"]
    (never,) = of_kind(result, "never-read")
    assert never["explanation"].startswith("element 1 was known from 0.010 s")
    assert "no read began after that" in never["explanation"]
    assert op_indices(never) == [add1]
    assert (result["never_read_count"], result["stable_count"]) == (1, 1)


def test_recovered(write_ops: WriteOps, ops_of: OpsOf) -> None:
    result, (add1, add2, add3, shown) = run(
        write_ops,
        ops_of,
        [
            add(0, 1, 0, 10, "info"),
            add(2, 2, 0, 10, "info"),  # near miss: unknown and never seen, so neither
            add(3, 3, 0, 10, None),  # never completed: as unknown as info
            read(1, 20, 30, [1, 3]),
        ],
    )
    assert result["valid"] is True
    assert result["anomaly_types"] == ["recovered"]
    recovered = of_kind(result, "recovered")
    assert [r["explanation"].split(":")[0] for r in recovered] == ["element 1", "element 3"]
    assert "had an unknown outcome (info)" in recovered[0]["explanation"]
    assert f"the read at index {shown} contains it" in recovered[0]["explanation"]
    assert op_indices(recovered[0]) == [add1, shown]
    assert op_indices(recovered[1]) == [add3, shown]
    assert recovered[1]["ops"][0]["type"] == "info"
    assert add2 not in {i for r in recovered for i in op_indices(r)}
    assert result["lost_count"] == 0 and result["stable_count"] == 2


def test_unexpected_elements(write_ops: WriteOps, ops_of: OpsOf) -> None:
    result, (failed, _, _, shown) = run(
        write_ops,
        ops_of,
        [
            add(0, 4, 0, 10, "fail"),
            add(2, 5, 0, 10, "info"),  # near miss: an unknown add may show up
            add(3, 6, 0, 10, "fail"),  # near miss: a failed add that stays away
            read(1, 20, 30, [4, 5, 9]),
        ],
    )
    assert result["valid"] is False
    assert result["anomaly_types"] == ["recovered", "unexpected"]
    never_added, failed_add = sorted(of_kind(result, "unexpected"), key=lambda a: len(a["ops"]))
    assert never_added["explanation"] == (
        f"the read at index {shown} contains element 9, which no operation ever added"
    )
    assert op_indices(never_added) == [shown]
    assert failed_add["explanation"] == (
        f"the read at index {shown} contains element 4, whose add at index {failed} failed"
    )
    assert op_indices(failed_add) == [failed, shown]
    assert result["unexpected_count"] == 2


QUORUM_TIMEOUT = "rolled back: the quorum was not collected in time"


def rolled_back_then_read() -> list[dict]:
    """Element 1's add is told it was rolled back, yet a read shows it. Near misses: element 2's
    add failed for another reason (unexpected in either mode); element 3's add was rolled back
    too, but another add of 3 succeeded; element 4 was rolled back and stays away."""
    return [
        add(0, 1, 0, 10, "fail") | {"error": QUORUM_TIMEOUT},
        add(2, 2, 0, 10, "fail") | {"error": "OperationalError: connection refused"},
        add(3, 3, 0, 10, "fail") | {"error": QUORUM_TIMEOUT},
        add(4, 3, 0, 10),
        add(5, 4, 0, 10, "fail") | {"error": "40001: could not serialize access"},
        read(1, 20, 30, [1, 2, 3]),
    ]


def test_a_rolled_back_add_that_a_read_shows_is_resurrected_in_confirm_rollback_mode(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    path, (rolled, refused, *_, shown) = write_ops(rolled_back_then_read())
    result = both_ways(
        sets.check, fed_sets.check, ops_of(path), path, contract=Contract.CONFIRM_ROLLBACK
    )
    assert result["valid"] is False
    assert result["anomaly_types"] == ["resurrected-rollback", "unexpected"]
    (resurrected,) = of_kind(result, "resurrected-rollback")
    assert resurrected["explanation"] == (
        f"element 1: its add at index {rolled} was told it was rolled back ({QUORUM_TIMEOUT}), "
        f"yet the read at index {shown}, invoked after that, contains it: a rolled-back write "
        "became visible"
    )
    assert op_indices(resurrected) == [rolled, shown]
    (unexpected,) = of_kind(result, "unexpected")
    assert op_indices(unexpected) == [refused, shown]
    assert (result["resurrected_rollback_count"], result["unexpected_count"]) == (1, 1)


def read_while_waiting(read_again: bool) -> list[dict]:
    """Element 5's add waits for its quorum from 0 to 40 and is then told it was rolled back; a
    read from 10 to 20 shows it, and a read from 50 to 60 shows it again only if `read_again`."""
    return [
        add(0, 5, 0, 40, "fail") | {"error": QUORUM_TIMEOUT},
        read(1, 10, 20, [5]),
        read(1, 50, 60, [5] if read_again else []),
    ]


def test_a_read_that_saw_an_add_before_its_rollback_is_a_dirty_read(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    path, (rolled, dirty, _) = write_ops(read_while_waiting(read_again=False))
    result = both_ways(
        sets.check, fed_sets.check, ops_of(path), path, contract=Contract.CONFIRM_ROLLBACK
    )
    assert result["valid"] is False
    assert result["anomaly_types"] == ["dirty-read"]
    (anomaly,) = result["anomalies"]
    assert anomaly["explanation"] == (
        f"element 5: the read at index {dirty} contains it while its add at index {rolled} "
        f"waited for the quorum; the add was then told it was rolled back ({QUORUM_TIMEOUT}, at "
        "0.040 s) and no read begun after that contains it: the read saw a write that was never "
        "confirmed"
    )
    assert op_indices(anomaly) == [rolled, dirty]
    assert result["dirty_read_count"] == 1


def test_a_rolled_back_add_read_again_after_its_rollback_is_resurrected_not_dirty(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    path, (rolled, _, later) = write_ops(read_while_waiting(read_again=True))
    result = both_ways(
        sets.check, fed_sets.check, ops_of(path), path, contract=Contract.CONFIRM_ROLLBACK
    )
    assert result["anomaly_types"] == ["resurrected-rollback"]
    assert op_indices(result["anomalies"][0]) == [rolled, later]
    assert result["dirty_read_count"] == 0


def test_under_the_durable_contract_a_rolled_back_add_that_a_read_shows_is_unexpected(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    path, (rolled, refused, *_, shown) = write_ops(rolled_back_then_read())
    for given in ({}, {"contract": Contract.DURABLE}):
        result = both_ways(sets.check, fed_sets.check, ops_of(path), path, **given)
        assert result["valid"] is False
        assert result["anomaly_types"] == ["unexpected"]
        assert sorted(op_indices(a) for a in result["anomalies"]) == [
            [rolled, shown],
            [refused, shown],
        ]
        assert result["resurrected_rollback_count"] == 0


def test_duplicated(write_ops: WriteOps, ops_of: OpsOf) -> None:
    result, (_, _, twice, _) = run(
        write_ops,
        ops_of,
        [
            add(0, 1, 0, 5),
            add(0, 2, 6, 8),
            read(1, 10, 20, [1, 2, 1, 1]),
            read(1, 30, 40, [2, 1]),  # near miss: every read has 2 once, and this one 1 once
        ],
    )
    assert result["valid"] is False
    assert result["anomaly_types"] == ["duplicated"]
    (dup,) = of_kind(result, "duplicated")
    assert dup["explanation"] == f"the read at index {twice} lists element 1 3 times"
    assert op_indices(dup) == [twice]
    assert (result["stable_count"], result["duplicated_count"]) == (2, 1)


def test_a_clean_history_and_one_without_reads(write_ops: WriteOps, ops_of: OpsOf) -> None:
    clean, _ = run(
        write_ops,
        ops_of,
        [add(0, 1, 0, 10), add(2, 2, 5, 15), read(1, 20, 30, [1, 2]), read(1, 40, 50, [2, 1])],
    )
    assert clean["valid"] is True and clean["anomalies"] == []
    assert {k: clean[k] for k in ("attempt_count", "ok_add_count", "stable_count")} == {
        "attempt_count": 2,
        "ok_add_count": 2,
        "stable_count": 2,
    }
    unread, _ = run(write_ops, ops_of, [add(0, 1, 0, 10)])
    assert unread["valid"] == "unknown"


def test_many_anomalies_are_capped_but_counted(write_ops: WriteOps, ops_of: OpsOf) -> None:
    count = sets.ANOMALY_CAP + 5
    result, _ = run(
        write_ops,
        ops_of,
        [read(1, 10, 20, list(range(100, 100 + count)))],
    )
    assert result["anomaly_counts"] == {"unexpected": count}
    assert len(result["anomalies"]) == sets.ANOMALY_CAP


def test_a_read_that_is_not_a_list_of_integers_is_bad_input(
    write_ops: WriteOps, ops_of: OpsOf
) -> None:
    path, (_, bad) = write_ops([add(0, 1, 0, 10), read(1, 20, 30, {"0": 1})])  # type: ignore[arg-type]
    with pytest.raises(BadInput, match=f"set read at history index {bad}"):
        both_ways(sets.check, fed_sets.check, ops_of(path), path)
