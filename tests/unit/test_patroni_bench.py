"""bench/patroni.py: the Patroni suite's own judgment of a set history (lost and unexpected
elements against the final read), the wait from a kill of the primary to the next write, how
long a primary cut off from etcd went on acknowledging, and every configuration a command the
harness takes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from patroni import CONFIGS
from run_rows import cut_off_acks, kill_to_write, suite_judgment

import nemesis
from clusters.kinds.patroni import PatroniCluster

S = 1_000_000_000


def op(t: float, type_: str, f: str, value: Any, **more: Any) -> dict[str, Any]:
    return {"time": int(t * S), "type": type_, "f": f, "value": value, "process": 0} | more


def add(t: float, type_: str, element: int, node: str = "n1") -> dict[str, Any]:
    """An add's event; as in a history, only its invocation says that it writes."""
    if type_ == "invoke":
        return op(t, type_, "add", element, workload="set", write=True, node="n1,n2,n3")
    return op(t, type_, "add", element, workload="set", node=node)


def acked(t: float, element: int, node: str) -> list[dict[str, Any]]:
    return [add(t - 0.05, "invoke", element), add(t, "ok", element, node)]


def test_the_suite_counts_lost_and_unexpected_elements_against_the_final_read() -> None:
    history = [
        add(1, "invoke", 1), add(1.1, "ok", 1),
        add(2, "invoke", 2), add(2.1, "ok", 2),  # acknowledged, then lost
        add(3, "invoke", 3), add(3.1, "info", 3),  # unknown: present or not, no matter
        op(4, "ok", "read", [1], workload="set"),  # an earlier read is not the final one
        op(9, "ok", "read", [1, 3, 7], workload="set"),  # 7 was never attempted
    ]  # fmt: skip
    assert suite_judgment(history) == {"suite_lost": 1, "suite_unexpected": 1}
    assert suite_judgment(history[:6]) == {"suite_lost": None, "suite_unexpected": None}


def nemesis_info(t: float, f: str, value: dict[str, Any]) -> dict[str, Any]:
    return op(t, "info", f, value) | {"process": "nemesis"}


def test_a_kill_of_the_writing_node_is_timed_to_the_next_write() -> None:
    history = [
        *acked(1, 1, "n1"),
        nemesis_info(2, "start-kill-process", {"process": "patroni", "targets": ["n1"]}),
        *acked(14.5, 2, "n2"),  # promoted once the key expired
        nemesis_info(20, "start-kill", {"targets": ["n3"]}),  # a replica: not timed
        *acked(21, 3, "n2"),
        op(22, "ok", "read", [1, 2, 3], workload="set", node="n2"),  # a read: no write
    ]
    assert kill_to_write(history) == 12.5
    assert kill_to_write(history[:2]) is None


def test_a_primary_cut_off_from_etcd_is_timed_to_its_last_acknowledgement() -> None:
    grudge = {"n1": ["n4", "n5", "n6"], "n4": ["n1"], "n5": ["n1"], "n6": ["n1"]}
    cut = {"shape": "primary-coordinators", "grudge": grudge}
    history = [
        nemesis_info(10, "start-partition", cut),
        *acked(11, 1, "n1"),
        *acked(25, 2, "n1"),  # still acknowledging 15 s after the cut
        *acked(26, 3, "n2"),
        nemesis_info(40, "stop-partition", {}),
        *acked(41, 4, "n1"),  # after the heal: not counted
    ]
    assert cut_off_acks(history, {"n4", "n5", "n6"}) == 15.0


def test_every_configuration_is_a_run_the_harness_takes() -> None:
    for sync, workloads, faults, _, _ in CONFIGS.values():
        PatroniCluster.checked_options({"patroni_sync": sync})
        nemesis.validate(faults.split(","), 6, "patroni", coordinated=True, kind=PatroniCluster)
        assert set(workloads.split(",")) <= {"set", "append", "bank"}
