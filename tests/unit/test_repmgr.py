"""The repmgr kind's declarations: its options, the repmgr.conf each fencing choice writes, its
poll records through the polls file, the faults it offers, the moments its repmgrds' shared
memory shows and the rule that its nodes agree on the primary once faults heal."""

from __future__ import annotations

from pathlib import Path

import pytest

import nemesis
from checkers.cluster_state import Evidence
from checkers.moments import occurrences
from clusters.kinds.patroni import PatroniCluster
from clusters.kinds.repmgr import (
    CONF,
    DeposedWritable,
    ElectionDue,
    Following,
    PrimaryAgreed,
    PrimaryLost,
    RepmgrCluster,
    RepmgrPoll,
    WitnessPoll,
    failover_time,
    repmgr_conf,
)
from clusters.kinds.streaming import StreamingCluster
from clusters.registry import cluster_kind
from core.errors import BadInput
from core.polls import Record, Round, encode_round, read_rounds

S = 1_000_000_000


def settings(conf: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in conf.splitlines())


def test_the_kind_is_registered_with_its_options_checked() -> None:
    kind = cluster_kind("repmgr")
    assert kind is RepmgrCluster
    options = kind.checked_options({})
    assert options["members"] == 3 and options["witness"] == "on"
    assert options["repmgr_fencing"] == "none" and options["replication"] == "async"
    assert kind.nodes_needed(options) == 4  # the witness on a node after the members
    assert kind.nodes_needed(kind.checked_options({"witness": "off"})) == 3
    # repmgr's defaults: 6 attempts 10 s apart before an election
    assert kind.failover_s(options) == failover_time(6, 10) == 72
    with pytest.raises(BadInput, match="unknown --repmgr-fencing 'stonith'"):
        kind.checked_options({"repmgr_fencing": "stonith"})
    with pytest.raises(BadInput, match="--members must be at least 2"):
        kind.checked_options({"members": 1})


def test_each_fencing_choice_writes_what_repmgr_reads() -> None:
    plain = settings(repmgr_conf(2, "n2", attempts=3, interval=4, fencing="none"))
    assert plain["node_id"] == "2" and plain["node_name"] == "'n2'"
    assert plain["failover"] == "'automatic'"
    assert plain["reconnect_attempts"] == "3" and plain["reconnect_interval"] == "4"
    assert f"-f {CONF}" in plain["promote_command"] and "%n" in plain["follow_command"]
    # Postgres restarted by repmgr runs under the node's faked clock, as the harness starts it
    assert "LD_PRELOAD=" in plain["service_start_command"]
    assert "primary_visibility_consensus" not in plain
    assert "child_nodes_disconnect_command" not in plain
    consensus = settings(repmgr_conf(2, "n2", attempts=3, interval=4, fencing="consensus"))
    assert consensus["primary_visibility_consensus"] == "true"
    assert "child_nodes_disconnect_command" not in consensus
    fenced = settings(repmgr_conf(2, "n2", attempts=3, interval=4, fencing="disconnect-command"))
    assert fenced["primary_visibility_consensus"] == "true"
    assert "-m immediate stop" in fenced["child_nodes_disconnect_command"]


def test_its_records_keep_their_type_through_the_polls_file(tmp_path: Path) -> None:
    polls = tmp_path / "cluster.jsonl"
    member = RepmgrPoll(writable=True, timeline=2, lsn=100, registered="primary", active=True,
                        primary_seen=("n1",), repmgrd=True, attempts_s=60,
                        last_event="standby_promote n1")  # fmt: skip
    standby = RepmgrPoll(standby=True, timeline=2, registered="standby", active=True,
                         primary_seen=("n1",), repmgrd=True, unseen_s=1,
                         told_to_follow="n3")  # fmt: skip
    witness = WitnessPoll(primary_seen=("n1",), repmgrd=True, unseen_s=0)
    rounds = [Round(time=S, nodes={"n1": member, "n2": standby, "n4": witness})]
    polls.write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    assert read_rounds(polls) == rounds
    assert member.leads() and member.led_term() == 2
    assert member.lane_state() == "primary"
    assert RepmgrPoll(registered="primary", active=False).lane_state() == "primary (inactive)"


def test_its_packages_kill_repmgrd_alone_and_reach_the_witness() -> None:
    names = [p.name for p in nemesis.packages(["all"], 4, False, True, kind=RepmgrCluster)]
    assert "kill-repmgrd" in names and "kill-postgres" in names
    assert "partition-dcs" in names and "kill-dcs" in names
    assert "promote" not in names  # repmgrd fails over by itself
    assert "restart-deposed" in names  # ... and fences nothing: an operator may restart the old


def test_restart_deposed_is_refused_where_the_manager_fences_or_nobody_fails_over() -> None:
    for cluster, kind in (("patroni", PatroniCluster), ("streaming", StreamingCluster)):
        with pytest.raises(BadInput, match="restart-deposed needs a manager that fails over"):
            nemesis.validate(["restart-deposed"], 3, cluster, kind=kind)


def member(
    writable: bool, sees: str, timeline: int = 1, unseen: int | None = 0, **said: object
) -> RepmgrPoll:
    """A member at 15 s of reconnection attempts: writable (a primary) or a standby, naming
    `sees` as the primary, its repmgrd `unseen` seconds from its upstream."""
    return RepmgrPoll(standby=not writable, writable=writable, timeline=timeline,
                      registered="primary" if writable else "standby", active=True,
                      primary_seen=(sees,), repmgrd=True, unseen_s=None if writable else unseen,
                      attempts_s=15, **said)  # type: ignore[arg-type]  # fmt: skip


def failover(seconds: int, old_writable_after: bool) -> list[Round]:
    """n1 cut off from 10 s: the standbys' repmgrds lose it, their attempts run out at 25 s, n3
    is promoted at 28 s and n2 follows it at 31 s; n1 goes on taking writes after that, or
    stopped itself (it does not answer)."""
    rounds = []
    for t in range(seconds):
        lost = max(0, t - 10)
        promoted, followed = t >= 28, t >= 31
        nodes: dict[str, Record] = {}
        if t < 28 or old_writable_after:
            nodes["n1"] = member(True, "n1")
        if not promoted:
            nodes["n2"] = member(False, "n1", unseen=lost)
            nodes["n3"] = member(False, "n1", unseen=lost)
        else:
            nodes["n3"] = member(True, "n3", timeline=2)
            nodes["n2"] = (
                member(False, "n3", timeline=2, unseen=None)
                if followed
                else member(False, "n3", unseen=lost, told_to_follow="n3")
            )
        nodes["n4"] = WitnessPoll(primary_seen=("n3",) if t >= 40 else ("n1",), repmgrd=True,
                                  unseen_s=lost if not promoted else 0)  # fmt: skip
        rounds.append(Round(time=t * S, nodes=nodes))
    return rounds


def test_its_moments_follow_a_failover_from_the_lost_primary_to_the_follow() -> None:
    rounds = failover(45, old_writable_after=False)
    (lost,) = occurrences(rounds, PrimaryLost)
    # past two monitor intervals unseen, until n2, the last, follows the new primary
    assert lost["start"] == 14 and lost["end"] == 30
    assert lost["roles"] == {"lost": ["n2", "n3", "n4"], "leader": ["n1"], "others": []}
    (due,) = occurrences(rounds, ElectionDue)
    assert due["start"] == 25 and due["end"] == 27  # the attempts' 15 s ran out: an election
    assert due["roles"] == {"candidates": ["n2", "n3"], "deposed": ["n1"], "others": ["n4"]}
    (following,) = occurrences(rounds, Following)
    assert following["start"] == 28 and following["end"] == 30
    assert following["roles"] == {"following": ["n2"], "leader": ["n3"]}


def test_a_standby_whose_repmgrd_is_stopped_has_not_lost_the_primary() -> None:
    stopped = RepmgrPoll(standby=True, timeline=1, repmgrd=False, unseen_s=40)
    rounds = [Round(time=S, nodes={"n1": member(True, "n1"), "n2": stopped})]
    assert occurrences(rounds, PrimaryLost) == []
    assert member(False, "n1", unseen=40).lost()


def agreement(rounds: list[Round], windows: list[tuple[float, float]]) -> list[dict]:
    rule = PrimaryAgreed()
    for r in rounds:
        rule.observe(r)
    return rule.report(Evidence(windows))


def test_a_deposed_primary_still_writable_after_the_heal_is_named() -> None:
    """The cut healed at 30 s; past the failover time (15 + 2 + 10 s), the witness's copy (15 s)
    and the settling time (10 s), n1 still took writes beside n3."""
    (found,) = agreement(failover(120, old_writable_after=True), [(10.0, 30.0)])
    assert found["type"] == "primary-disagreed" and found["nodes"] == ["n1", "n3"]
    assert found["window_ns"] == [82 * S, 119 * S]
    assert "n1 and n3 each took writes" in found["explanation"]
    assert "the last fault healed at 30.0 s" in found["explanation"]


def test_a_failover_that_fenced_the_old_primary_is_agreed_on() -> None:
    assert agreement(failover(120, old_writable_after=False), [(10.0, 30.0)]) == []


def test_disagreement_within_the_grace_or_under_a_fault_is_not_judged() -> None:
    rounds = failover(120, old_writable_after=True)
    assert agreement(rounds[:80], [(10.0, 30.0)]) == []  # 81 s: within 52 s of the heal
    assert agreement(rounds, [(10.0, 30.0), (60.0, 119.5)]) == []  # a second fault till the end


def test_a_view_that_names_another_primary_is_a_disagreement() -> None:
    """One writable member, but the witness's copy names another (it never synced again)."""
    rounds = [
        Round(time=t * S, nodes={"n1": member(True, "n1"), "n2": member(False, "n1"),
                                 "n4": WitnessPoll(primary_seen=("n2",), repmgrd=True)})
        for t in range(60, 80)
    ]  # fmt: skip
    (found,) = agreement(rounds, [])
    assert found["nodes"] == ["n1", "n2"]
    assert "n1 named n1; n2 named n1; n4 named n2" in found["explanation"]


def write_by(node: str, at_s: float, index: int) -> dict:
    """An acknowledged write, as the history gives it, through `node` at `at_s`."""
    return {"process": 1, "type": "ok", "f": "add", "write": True, "node": node,
            "invoke_index": index, "invoke_time": int(at_s * S) - 5_000_000,
            "complete_time": int(at_s * S)}  # fmt: skip


def deposed(rounds: list[Round], writes: list[dict]) -> list[dict]:
    rule = DeposedWritable()
    for r in rounds:
        rule.observe(r)
    assert rule.wants_writes() == any(r.nodes.get("n1") for r in rounds[29:])
    return rule.report(Evidence(writes=writes))  # type: ignore[arg-type]


def test_writes_a_deposed_primary_acknowledged_beside_the_promoted_one_are_named() -> None:
    """n3 promoted at 28 s names itself primary; n1, on the older timeline, stayed writable to
    the end of the polls and acknowledged two writes after that (the users' 600 s run: the
    primary cut off, left running, its clients still connected)."""
    writes = [write_by("n1", 27.5, 1), write_by("n1", 30.5, 2), write_by("n3", 31.0, 3),
              write_by("n1", 40.0, 4)]  # fmt: skip
    (found,) = deposed(failover(45, old_writable_after=True), writes)
    assert found["type"] == "deposed-primary-acknowledged-writes"
    assert found["nodes"] == ["n1", "n3"] and found["count"] == 2
    assert [op["invoke_index"] for op in found["ops"]] == [2, 4]
    assert found["window_ns"] == [28 * S, 44 * S]
    assert "n1, on timeline 1, acknowledged 2 writes from 28.0 s to 44.0 s" in found["explanation"]
    assert deposed(failover(45, old_writable_after=False), writes) == []


def test_a_deposed_primary_writable_that_acknowledges_nothing_is_let_be() -> None:
    """Under synchronous replication its commits wait: writable, but no write acknowledged."""
    writes = [write_by("n1", 27.5, 1), write_by("n3", 31.0, 3)]
    assert deposed(failover(45, old_writable_after=True), writes) == []
