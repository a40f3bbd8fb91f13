"""The streaming kind's declarations and the judgments its polls feed: what each replication
mode asks of Postgres, where reads go and what they are held to, a standby far behind, and a
deposed primary that keeps acknowledging writes on its old timeline."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import nemesis
from checkers.cluster_state import DeposedAcknowledged, check
from checkers.moments import StandbyBehind, occurrences
from clusters.kinds.base import OperatorFailover
from clusters.kinds.streaming import (
    StreamingCluster,
    replication_confs,
    standby_names,
    upstream_conf,
)
from clusters.registry import cluster_kind
from core.errors import BadInput
from core.polls import Round, StreamingPoll, encode_round, read_rounds
from nemesis.promote import Promote

S = 1_000_000_000
MB = 1 << 20


def primary(timeline: int, lsn: int = 0) -> StreamingPoll:
    return StreamingPoll(standby=False, writable=True, timeline=timeline, lsn=lsn)


def standby(timeline: int, lsn: int, upstream: str | None = "n1") -> StreamingPoll:
    return StreamingPoll(standby=True, timeline=timeline, lsn=lsn, received=lsn, upstream=upstream)


def at(second: float, **nodes: StreamingPoll) -> Round:
    return Round(time=int(second * S), nodes=nodes)


def test_each_replication_mode_names_the_standbys_postgres_waits_for() -> None:
    names = ["n1", "n2", "n3"]
    assert standby_names("async", names) == ""
    assert standby_names("sync", names) == "FIRST 1 (n1, n2, n3)"
    assert standby_names("quorum", names) == "ANY 1 (n1, n2, n3)"
    # the standby's name in synchronous_standby_names is the application_name it connects with
    assert "application_name=n2" in upstream_conf("n1", 5432, "n2")
    assert "host=n1 port=5432 " in upstream_conf("n1", 5432, "n2")


def test_the_kind_is_registered_with_its_options_checked() -> None:
    kind = cluster_kind("streaming")
    assert kind is StreamingCluster
    options = kind.checked_options({})
    assert options == {
        "replicas": 2,
        "replication": "async",
        "synchronous_commit": "on",
        "read_from": "primary",
        "apply_delay": 0.0,
    }
    assert kind.nodes_needed(options) == 3
    with pytest.raises(BadInput, match="--apply-delay must be at least 0"):
        kind.checked_options({"apply_delay": -5})
    with pytest.raises(BadInput, match="--replication 'semi'"):
        kind.checked_options({"replication": "semi"})
    with pytest.raises(BadInput, match="--replicas must be at least 1"):
        kind.checked_options({"replicas": 0})


def test_reads_on_standbys_give_up_real_time_order() -> None:
    """A standby replays a commit some time after the primary acknowledged it: a read there
    that begins after COMMIT returned may miss it, which real-time order forbids."""
    order = {
        where: StreamingCluster.realtime_order_of(
            StreamingCluster.checked_options({"read_from": where})
        )
        for where in ("primary", "replicas", "any")
    }
    assert order == {"primary": True, "replicas": False, "any": False}


def test_a_poll_record_keeps_its_type_through_the_polls_file(tmp_path: Path) -> None:
    polls = tmp_path / "cluster.jsonl"
    rounds = [at(1, n1=primary(1, 5 * MB), n2=standby(1, 4 * MB))]
    polls.write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    (back,) = read_rounds(polls)
    assert back.nodes["n2"] == standby(1, 4 * MB)
    assert back.nodes["n1"].leads() and back.nodes["n1"].led_term() == 1
    assert not back.nodes["n2"].leads() and back.nodes["n2"].term_seen() == 1


def test_a_standby_behind_is_one_that_replayed_well_below_the_primary() -> None:
    rounds = [
        at(0, n1=primary(1, 10 * MB), n2=standby(1, 10 * MB - 4096), n3=standby(1, 2 * MB)),
        at(1, n1=primary(1, 10 * MB), n2=standby(1, 10 * MB), n3=standby(1, 10 * MB)),
        # no primary answered: nothing to be behind of
        at(2, n2=standby(1, 10 * MB), n3=standby(1, 1 * MB)),
    ]
    found = occurrences(rounds, StandbyBehind)
    assert [(f["start"], f["roles"]) for f in found] == [
        (0.0, {"behind": ["n3"], "leader": ["n1"], "up-to-date": ["n2"]})
    ]


def _failover_run(tmp_path: Path, last_write_s: float) -> tuple[list[dict[str, Any]], str]:
    """n1 primary of timeline 1; n2 promoted to timeline 2 at 6 s while n1, not fenced, still
    takes writes; writes acknowledged by n1 (2 s), n2 (7 s), then n1 again from `last_write_s`."""
    polls = tmp_path / "cluster.jsonl"
    rounds = [
        at(1, n1=primary(1, MB), n2=standby(1, MB)),
        at(6, n1=primary(1, 2 * MB), n2=primary(2, 2 * MB)),
    ]
    polls.write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    ops = []
    for i, (node, start) in enumerate([("n1", 2.0), ("n2", 7.0), ("n1", last_write_s)]):
        ops.append(
            {
                "process": i,
                "type": "ok",
                "f": "add",
                "value": i,
                "node": node,
                "write": True,
                "invoke_index": 2 * i,
                "invoke_time": int(start * S),
                "complete_time": int((start + 0.1) * S),
            }
        )
    return ops, str(polls)


def test_a_deposed_primary_acknowledging_on_its_old_timeline_is_named(tmp_path: Path) -> None:
    ops, polls = _failover_run(tmp_path, last_write_s=8.0)
    result = check(ops, polls, rules=(DeposedAcknowledged,))
    assert result["anomaly_types"] == ["deposed-primary-acknowledged"]
    (anomaly,) = result["anomalies"]
    assert [op["node"] for op in anomaly["ops"]] == ["n2", "n1"]
    assert "n1, primary of timeline 1, acknowledged" in anomaly["explanation"]
    assert "in timeline 2" in anomaly["explanation"]


def test_a_write_begun_before_the_new_timeline_acknowledged_any_is_not(tmp_path: Path) -> None:
    ops, polls = _failover_run(tmp_path, last_write_s=6.5)
    assert check(ops, polls, rules=(DeposedAcknowledged,))["valid"] is True


def test_promote_is_for_a_cluster_an_operator_fails_over_and_all_has_it_there() -> None:
    nemesis.validate(["promote"], 3, "streaming", kind=StreamingCluster)
    with pytest.raises(BadInput, match="the safekeeper cluster is not one"):
        nemesis.validate(["promote"], 5, "safekeeper")
    assert "promote" in [p.name for p in nemesis.packages(["all"], 3, kind=StreamingCluster)]
    assert "promote" not in [p.name for p in nemesis.packages(["all"], 5)]
    assert issubclass(StreamingCluster, OperatorFailover)


def test_the_seed_draws_how_the_primary_is_fenced() -> None:
    fences = {Promote.planned(["n1", "n2", "n3"], random.Random(seed)).fence for seed in range(20)}
    assert fences == {"stop", "isolate"}
    assert Promote("isolate").plan() == {"fault": "promote", "fence": "isolate"}


def test_only_the_last_standby_holds_its_replay_back() -> None:
    """--apply-delay: the last node (a standby) gets recovery_min_apply_delay, the others the
    same replication settings without it; none with no delay."""
    names = ["n1", "n2", "n3"]
    options = StreamingCluster.checked_options({"apply_delay": 2000})
    confs = replication_confs(names, options)
    assert "recovery_min_apply_delay = '2000ms'" in confs["n3"]
    assert not any("apply_delay" in confs[n] for n in ("n1", "n2"))
    assert confs["n1"] == confs["n2"] == confs["n3"].split("recovery_min")[0]
    plain = replication_confs(names, StreamingCluster.checked_options({}))
    assert not any("apply_delay" in c for c in plain.values())
