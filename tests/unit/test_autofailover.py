"""The autofailover kind's declarations: its options and the timeouts they scale, its poll
records through the polls file, the rule that holds a writable node to the monitor's goal, and
the moments the monitor's states show."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import nemesis
from checkers.cluster_state import check, leaders
from checkers.moments import occurrences
from clusters.kinds.autofailover import (
    AutofailoverCluster,
    CatchingUp,
    KeeperPoll,
    MonitorAssigned,
    MonitorPoll,
    PromotionAssigned,
    WaitPrimary,
    monitor_record,
    timeouts,
    wal_sender_timeout,
)
from clusters.registry import cluster_kind
from core.errors import BadInput
from core.polls import COORDINATION, Record, Round, encode_round, read_rounds
from harness.gate import moment_names
from nemesis import grudges
from nemesis.partition import WITH_UNPROMOTABLE, late_grudge

S = 1_000_000_000


def test_the_kind_is_registered_with_its_options_checked() -> None:
    kind = cluster_kind("autofailover")
    assert kind is AutofailoverCluster
    options = kind.checked_options({})
    assert options["members"] == 3 and options["partition_timeout"] == 20
    assert options["number_sync_standbys"] is None  # as the monitor sets it
    assert kind.nodes_needed(options) == 4  # the monitor on a node after the members
    assert kind.coordinated  # the coordination faults reach the monitor
    assert kind.failover_s(options) == 55  # 20 s unhealthy, 30 s demote timeout, a few loops
    assert kind.checked_options({"candidate_priority": "n3=0"})["candidate_priority"] == "n3=0"
    with pytest.raises(BadInput, match="--candidate-priority priorities are 0 to 100, not 101"):
        kind.checked_options({"candidate_priority": "n3=101"})
    with pytest.raises(BadInput, match="--candidate-priority takes NODE=PRIORITY pairs"):
        kind.checked_options({"candidate_priority": "0"})
    with pytest.raises(BadInput, match="--replication-quorum values are true or false, not no"):
        kind.checked_options({"replication_quorum": "n2=true,n3=no"})
    with pytest.raises(BadInput, match="--partition-timeout must be at least 2"):
        kind.checked_options({"partition_timeout": 1})


def test_the_timeouts_are_pg_auto_failovers_own_at_20_s_and_scale_alike() -> None:
    own = timeouts(20)
    assert own["pgautofailover.node_considered_unhealthy_timeout"] == "20000ms"
    assert own["pgautofailover.primary_demote_timeout"] == "30000ms"
    assert own["pgautofailover.health_check_period"] == "5000ms"
    assert wal_sender_timeout(20) == "30000ms"  # as pg_autoctl writes it
    short = timeouts(6)
    assert short["pgautofailover.node_considered_unhealthy_timeout"] == "6000ms"
    assert short["pgautofailover.primary_demote_timeout"] == "9000ms"
    assert wal_sender_timeout(6) == "9000ms"


def test_its_packages_kill_the_keeper_alone_and_reach_the_monitor() -> None:
    names = [p.name for p in nemesis.packages(["all"], 4, False, True, kind=AutofailoverCluster)]
    assert "kill-keeper" in names and "kill-postgres" in names
    assert "switchover" in names and "partition-dcs" in names and "kill-dcs" in names
    assert "promote" not in names  # the monitor fails over by itself
    assert "partition-unpromotable" in names
    gated = moment_names()
    assert {"promotion-assigned", "wait-primary", "catching-up"} <= set(gated)


def test_the_primary_is_cut_off_with_the_members_never_promoted_nor_counted() -> None:
    names = ["n1", "n2", "n3", "n4"]
    grudge = late_grudge(WITH_UNPROMOTABLE, names, "n1", ["n4"], ["n3"])
    assert grudges.as_json(grudge) == {"n1": ["n2", "n4"], "n2": ["n1", "n3"],
                                        "n3": ["n2", "n4"], "n4": ["n1", "n3"]}  # fmt: skip
    # with none configured, the primary alone
    assert late_grudge(WITH_UNPROMOTABLE, names, "n1", ["n4"], []) == grudges.isolate(names, ["n1"])
    kind = AutofailoverCluster.__new__(AutofailoverCluster)
    kind.options = {"members": 3, "candidate_priority": "n2=0", "replication_quorum": "n3=false"}
    kind.members = lambda: [SimpleNamespace(name=f"n{i}") for i in (1, 2, 3)]  # type: ignore[method-assign]
    assert kind.unpromotable() == ["n2", "n3"]
    with pytest.raises(BadInput, match="partition-unpromotable needs members that are never"):
        nemesis.validate(["partition-unpromotable"], 5, "safekeeper")


def test_its_records_keep_their_type_through_the_polls_file(tmp_path: Path) -> None:
    polls = tmp_path / "cluster.jsonl"
    member = KeeperPoll(writable=True, timeline=2, lsn=100, reported="primary", goal="primary")
    table = {"n1": ["primary", "primary", 1, 100, 50, True]}
    rounds = [Round(time=S, nodes={"n1": member, COORDINATION: monitor_record(table, 6)})]
    polls.write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    assert read_rounds(polls) == rounds
    assert rounds[0].nodes[COORDINATION] == MonitorPoll(
        nodes={"n1": ["primary", "primary", 1, 100]}, primary="n1", timeout=6
    )


def _rounds(tmp_path: Path, n1_writable_until: int, seconds: int, timeout: int) -> str:
    """A round a second: n1 the primary until 3 s, when the monitor gives the part to n2, which
    takes writes from then; n1 writable until `n1_writable_until`."""
    rounds = []
    for i in range(seconds):
        moved = i >= 3
        table = {
            "n1": ["primary", "demote_timeout" if moved else "primary", 0, 100],
            "n2": ["wait_primary" if moved else "secondary"] * 2 + [1, 100],
        }
        nodes: dict[str, Record] = {
            "n1": KeeperPoll(writable=i <= n1_writable_until, timeline=1),
            "n2": KeeperPoll(writable=moved, standby=not moved, timeline=2 if moved else 1),
            COORDINATION: MonitorPoll(
                nodes=table, primary="n2" if moved else "n1", timeout=timeout
            ),
        }
        rounds.append(Round(time=i * S, nodes=nodes))
    path = tmp_path / "cluster.jsonl"
    path.write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    return str(path)


def test_a_node_writable_past_the_failover_time_against_the_monitor_is_named(
    tmp_path: Path,
) -> None:
    """At a 6 s partition timeout the cluster fails over within 20 s: n1, demoted at 3 s, still
    took writes at 30 s."""
    result = check([], _rounds(tmp_path, 30, 32, 6), rules=(MonitorAssigned,))
    assert result["anomaly_types"] == ["writable-against-monitor"]
    (anomaly,) = result["anomalies"]
    assert anomaly["nodes"] == ["n1", "n2"]
    assert "while the monitor had given the primary's part to n2" in anomaly["explanation"]


def test_a_primary_that_stopped_itself_within_the_failover_time_is_not(tmp_path: Path) -> None:
    assert check([], _rounds(tmp_path, 15, 32, 6), rules=(MonitorAssigned,))["valid"]


def test_the_leader_lane_shows_what_the_monitor_had_each_member_do() -> None:
    """A stretch is cut where a member's reported or goal state changes, though the same node
    leads, and names every member's state; the monitor's own entry names none."""

    def member(writable: bool, reported: str, goal: str) -> KeeperPoll:
        return KeeperPoll(writable=writable, timeline=1, reported=reported, goal=goal)

    table = monitor_record({"n1": ["primary", "primary", 1, 9, 50, True]}, 20)
    rounds = [
        Round(time=1 * S, nodes={"n1": member(True, "primary", "primary"),
                                 "n2": member(False, "secondary", "secondary"),
                                 COORDINATION: table}),
        Round(time=2 * S, nodes={"n1": member(True, "primary", "primary"),
                                 "n2": member(False, "secondary", "secondary")}),
        Round(time=5 * S, nodes={"n1": member(True, "primary", "wait_primary"),
                                 "n2": member(False, "secondary", "catchingup")}),
        Round(time=7 * S, nodes={"n1": KeeperPoll(writable=True, timeline=1),
                                 "n2": member(False, "catchingup", "catchingup")}),
    ]  # fmt: skip
    lane = leaders(rounds)
    assert [(s["start"], s["nodes"], s.get("states")) for s in lane] == [
        (1.0, ["n1"], {"n1": "primary", "n2": "secondary"}),
        (5.0, ["n1"], {"n1": "primary → wait_primary", "n2": "secondary → catchingup"}),
        (7.0, ["n1"], {"n2": "catchingup"}),  # n1's keeper did not say: no state of its own
    ]


def test_the_monitors_moments_name_their_roles(tmp_path: Path) -> None:
    rounds = read_rounds(Path(_rounds(tmp_path, 3, 8, 6)))
    waiting = occurrences(rounds, WaitPrimary)
    assert [o["roles"] for o in waiting] == [{"leader": ["n2"], "standbys": ["n1"]}]
    promoting = [
        Round(time=0, nodes={COORDINATION: monitor_record({
            "n1": ["primary", "primary", 1, 9, 50, True],
            "n2": ["secondary", "secondary", 1, 9, 50, True]}, 20)}),
        Round(time=S, nodes={COORDINATION: monitor_record({
            "n1": ["primary", "draining", 0, 9, 50, True],
            "n2": ["secondary", "prepare_promotion", 1, 9, 50, True],
            "n3": ["catchingup", "catchingup", 1, 5, 50, True]}, 20)}),
    ]  # fmt: skip
    (promotion,) = occurrences(promoting, PromotionAssigned)
    assert promotion["roles"] == {"new-leader": ["n2"], "deposed": ["n1"], "others": ["n3"]}
    (catching,) = occurrences(promoting, CatchingUp)
    assert catching["roles"] == {"catching-up": ["n3"], "leader": []}
