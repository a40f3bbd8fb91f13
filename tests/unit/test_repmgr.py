"""The repmgr kind's declarations: its options, the repmgr.conf each fencing choice writes, its
poll records through the polls file, and the faults it offers."""

from __future__ import annotations

from pathlib import Path

import pytest

import nemesis
from clusters.kinds.patroni import PatroniCluster
from clusters.kinds.repmgr import (
    CONF,
    RepmgrCluster,
    RepmgrPoll,
    WitnessPoll,
    failover_time,
    repmgr_conf,
)
from clusters.kinds.streaming import StreamingCluster
from clusters.registry import cluster_kind
from core.errors import BadInput
from core.polls import Round, encode_round, read_rounds

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
                        primary_seen=("n1",))  # fmt: skip
    rounds = [Round(time=S, nodes={"n1": member, "n4": WitnessPoll(primary_seen=("n1",))})]
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
