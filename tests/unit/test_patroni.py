"""The patroni kind's declarations: its options and what each asks of Patroni, the etcd
ensemble's command line, and its poll records through the polls file and the cluster-state
judgments (a deposed primary that keeps acknowledging writes on its old timeline)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest

import nemesis
from checkers.cluster_state import DeposedAcknowledged, LeaderKeyHeld, Timelines, check
from clusters.kinds.patroni import (
    PatroniCluster,
    etcd_command,
    loop_of,
    patroni_config,
    same_minor,
)
from clusters.kinds.streaming import StreamingCluster
from clusters.registry import cluster_kind
from core.errors import BadInput
from core.polls import (
    COORDINATION,
    LeaderKeyPoll,
    PatroniPoll,
    Record,
    Round,
    encode_round,
    read_rounds,
)
from nemesis.switchover import Switchover
from tests.unit.test_streaming import _failover_run

S = 1_000_000_000


def test_the_kind_is_registered_with_its_options_checked() -> None:
    kind = cluster_kind("patroni")
    assert kind is PatroniCluster
    options = kind.checked_options({})
    assert options == {
        "members": 3,
        "patroni_sync": "off",
        "ttl": 30,
        "read_from": "primary",
        "patroni_patch": None,
    }
    assert kind.nodes_needed(options) == 6  # three etcd servers after the members
    assert kind.coordinated  # the coordinator faults reach etcd
    assert kind.checked_options({"patroni_sync": "quorum"})["patroni_sync"] == "quorum"
    with pytest.raises(BadInput, match="patroni-sync"):
        kind.checked_options({"patroni_sync": "always"})
    with pytest.raises(BadInput, match="--members must be at least 2"):
        kind.checked_options({"members": 1})
    with pytest.raises(BadInput, match="serializable"):
        raise BadInput(
            kind.isolation_refused(kind.checked_options({"read_from": "any"}), "serializable") or ""
        )


def test_a_patch_folder_must_hold_modules_patroni_has(tmp_path: Path) -> None:
    kind = cluster_kind("patroni")
    with pytest.raises(BadInput, match="--patroni-patch must be a folder"):
        kind.checked_options({"patroni_patch": str(tmp_path / "nowhere")})
    with pytest.raises(BadInput, match=r"holds no \.py file"):
        kind.checked_options({"patroni_patch": str(tmp_path)})
    (tmp_path / "dcs").mkdir()
    (tmp_path / "dcs" / "etcd3.py").write_text("")
    (tmp_path / "ha.py").write_text("")
    assert kind.checked_options({"patroni_patch": str(tmp_path)})["patroni_patch"] == str(tmp_path)
    (tmp_path / "hq.py").write_text("")  # a typo would be copied beside the package, unread
    with pytest.raises(BadInput, match=r"holds hq\.py, which patroni==4\.1\.5 has no module of"):
        kind.checked_options({"patroni_patch": str(tmp_path)})


def test_sync_on_and_quorum_are_patronis_strict_synchronous_modes() -> None:
    for sync, mode, strict in (
        ("off", False, False),
        ("on", True, True),
        ("quorum", "quorum", True),
    ):
        config = json.loads(patroni_config("n2", ["n4:2379", "n5:2379", "n6:2379"], sync, 30))
        dcs = config["bootstrap"]["dcs"]
        assert dcs["synchronous_mode"] == mode and dcs["synchronous_mode_strict"] is strict
        assert dcs["failsafe_mode"] and dcs["check_timeline"]
        assert dcs["postgresql"]["use_pg_rewind"] and dcs["postgresql"]["use_slots"]
        assert config["etcd3"]["hosts"] == ["n4:2379", "n5:2379", "n6:2379"]
        assert config["postgresql"]["connect_address"] == "n2:5432"
        assert config["watchdog"]["mode"] == "off"


def test_through_proxies_patroni_keeps_to_the_addresses_it_is_given() -> None:
    """Without use_proxies, Patroni asks etcd for its members' own addresses and goes around
    the proxies of the etcd link."""
    proxies = ["127.0.0.1:30000", "127.0.0.1:30001", "127.0.0.1:30002"]
    config = json.loads(patroni_config("n1", proxies, "on", 30, through_proxies=True))
    assert config["etcd3"] == {"hosts": proxies, "use_proxies": True}
    direct = json.loads(patroni_config("n1", ["n4:2379"], "on", 30))
    assert "use_proxies" not in direct["etcd3"]


def test_the_loop_keeps_patronis_rule_for_any_ttl() -> None:
    """loop_wait + 2 * retry_timeout <= ttl: Patroni needs it and does not enforce it."""
    assert loop_of(30) == (10, 10)
    for ttl in range(3, 120):
        loop_wait, retry = loop_of(ttl)
        assert loop_wait >= 1 and loop_wait + 2 * retry <= ttl


def test_each_etcd_server_names_the_whole_ensemble() -> None:
    cmd = etcd_command("n5", ["n4", "n5", "n6"])
    assert "--name n5 " in cmd and "--advertise-client-urls http://n5:2379" in cmd
    assert "--initial-cluster n4=http://n4:2380,n5=http://n5:2380,n6=http://n6:2380" in cmd


def test_patroni_waits_for_the_ensemble_raised_to_its_servers_version() -> None:
    """A new etcd 3.4 ensemble says 3.0.0 for its first seconds: not yet."""
    assert same_minor("3.4.0", "3.4.23")
    assert not same_minor("3.0.0", "3.4.23")
    assert not same_minor("3.3.0", "3.4.23")


def test_its_records_keep_their_type_through_the_polls_file(tmp_path: Path) -> None:
    polls = tmp_path / "cluster.jsonl"
    member = PatroniPoll(standby=False, writable=True, timeline=3, lsn=100, role="master")
    rounds = [Round(time=S, nodes={"n1": member, COORDINATION: LeaderKeyPoll("n1")})]
    polls.write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    assert read_rounds(polls) == rounds
    assert member.leads() and member.led_term() == 3 and member.term_unit == "timeline"


def test_a_deposed_member_acknowledging_on_its_old_timeline_is_named(tmp_path: Path) -> None:
    """The split brain of streaming's unit test (n1 writable on timeline 1 after n2 began
    timeline 2), polled as Patroni members: the same rule names it."""
    ops, polls = _failover_run(tmp_path, last_write_s=8.0)
    rounds = [
        Round(
            time=r.time,
            nodes={
                n: PatroniPoll(**msgspec.structs.asdict(s), role="master" if s.writable else None)
                for n, s in r.nodes.items()
            },
        )
        for r in read_rounds(Path(polls))
    ]
    Path(polls).write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    result = check(ops, polls, rules=(DeposedAcknowledged,))
    assert result["anomaly_types"] == ["deposed-primary-acknowledged"]
    assert "n1, primary of timeline 1, acknowledged" in result["anomalies"][0]["explanation"]


def test_switchover_is_for_a_kind_whose_manager_does_one_and_all_has_it_there() -> None:
    nemesis.validate(["switchover"], 6, "patroni", coordinated=True, kind=PatroniCluster)
    with pytest.raises(BadInput, match="switchover needs a manager that switches"):
        nemesis.validate(["switchover"], 3, "streaming", kind=StreamingCluster)
    on_patroni = [p.name for p in nemesis.packages(["all"], 6, False, True, kind=PatroniCluster)]
    assert "switchover" in on_patroni and "partition-dcs" in on_patroni
    assert "promote" not in on_patroni  # Patroni fails over by itself
    assert "switchover" not in [p.name for p in nemesis.packages(["all"], 5)]
    assert Switchover.planned(["n1", "n2"], random.Random(0)).plan() == {"fault": "switchover"}


def _key_rounds(tmp_path: Path, writable_n1_until: float, key: list[str | None]) -> str:
    """A round a second: n1 writable until `writable_n1_until` s, n2 writable from 3 s, the
    leader key naming key[i] in round i (TTL 9 s)."""
    rounds = []
    for i, holder in enumerate(key):
        nodes: dict[str, Record] = {COORDINATION: LeaderKeyPoll(holder, 9)}
        nodes["n1"] = PatroniPoll(writable=i <= writable_n1_until, timeline=1)
        nodes["n2"] = PatroniPoll(writable=i >= 3, standby=i < 3, timeline=2 if i >= 3 else 1)
        rounds.append(Round(time=i * S, nodes=nodes))
    return _polls_file(tmp_path / "cluster.jsonl", rounds)


def _polls_file(path: Path, rounds: list[Round]) -> str:
    path.write_bytes(b"".join(encode_round(r) + b"\n" for r in rounds))
    return str(path)


def test_a_primary_writable_past_the_ttl_while_the_key_names_another_is_named(
    tmp_path: Path,
) -> None:
    """The key moved to n2 at 3 s; n1 still took writes at 14 s, more than the TTL later."""
    polls = _key_rounds(tmp_path, 14, ["n1"] * 3 + ["n2"] * 13)
    result = check([], polls, rules=(LeaderKeyHeld,))
    assert result["anomaly_types"] == ["writable-without-leader-key"]
    (anomaly,) = result["anomalies"]  # one stretch, reported once
    assert anomaly["nodes"] == ["n1", "n2"]
    assert (
        "n1 took writes from 3.0 s to at least 13.0 s while etcd's leader key named n2"
        in (anomaly["explanation"])
    )


def test_a_primary_demoted_within_the_ttl_or_kept_by_failsafe_is_not(tmp_path: Path) -> None:
    """n1 demoted 8 s after the key moved on: within the TTL. And n1 writable for 13 s while
    no key could be read (etcd out of reach): failsafe mode's to allow."""
    demoted = _key_rounds(tmp_path, 11, ["n1"] * 3 + ["n2"] * 13)
    assert check([], demoted, rules=(LeaderKeyHeld,))["valid"] is True
    failsafe = _key_rounds(tmp_path, 14, ["n1"] * 3 + [None] * 13)
    assert check([], failsafe, rules=(LeaderKeyHeld,))["valid"] is True


def test_patroni_and_its_postgres_are_killed_alone_by_packages_of_their_own() -> None:
    for name in ("kill-postgres", "kill-patroni"):
        nemesis.validate([name], 6, "patroni", coordinated=True, kind=PatroniCluster)
        with pytest.raises(BadInput, match=f"unknown nemesis '{name}'"):
            nemesis.validate([name], 3, "streaming", kind=StreamingCluster)
    chosen = nemesis.packages(["kill-patroni"], 6, kind=PatroniCluster)
    rng = random.Random(0)
    faults = [chosen[0].make(["n1", "n2"], rng) for _ in range(50)]
    assert {f.plan()["process"] for f in faults} == {"patroni"}  # type: ignore[union-attr]
    assert {f.plan()["target"] for f in faults} == {"primaries", "one"}  # type: ignore[union-attr]
    on_patroni = [p.name for p in nemesis.packages(["all"], 6, False, True, kind=PatroniCluster)]
    assert {"kill-postgres", "kill-patroni"} <= set(on_patroni)


def _timeline_rounds(tmp_path: Path, states: list[dict[str, tuple[bool, int]]]) -> str:
    """A round a second, each member's (writable, timeline) as `states` give them."""
    rounds = [
        Round(
            time=i * S,
            nodes={
                n: PatroniPoll(writable=w, standby=not w, timeline=tl) for n, (w, tl) in s.items()
            },
        )
        for i, s in enumerate(states)
    ]
    return _polls_file(tmp_path / "timelines.jsonl", rounds)


def test_a_failover_and_a_killed_patronis_orphan_beside_the_new_primary_keep_timelines(
    tmp_path: Path,
) -> None:
    """suite-off at seed 0: n3, primary on timeline 4, lost its Patroni and went on taking
    writes; n1 was promoted onto timeline 5 beside it (the leader-key rule names that). The
    timelines still went forward, one writable member on each; a standby lagging on an older
    timeline (n3 rewound, not yet replaying timeline 5) is no member taking writes."""
    polls = _timeline_rounds(tmp_path, [
        {"n1": (False, 4), "n3": (True, 4)},
        {"n1": (True, 5), "n3": (True, 4)},
        {"n1": (True, 5), "n3": (False, 4)},
        {"n1": (True, 5), "n3": (False, 5)},
    ])  # fmt: skip
    assert check([], polls, rules=(Timelines,))["valid"] is True


def test_two_members_writable_on_one_timeline_or_a_timeline_gone_back_are_named(
    tmp_path: Path,
) -> None:
    two = _timeline_rounds(tmp_path, [{"n1": (True, 2), "n2": (True, 2)}] * 3)
    result = check([], two, rules=(Timelines,))
    assert result["anomaly_types"] == ["two-writable-in-timeline"]
    (anomaly,) = result["anomalies"]  # once for the timeline, however long it lasts
    assert "n1 and n2 each took writes on timeline 2" in anomaly["explanation"]
    back = _timeline_rounds(tmp_path, [
        {"n1": (True, 1), "n2": (False, 1)},
        {"n1": (True, 1), "n2": (True, 2)},
        {"n1": (True, 1), "n2": (False, None)},  # the new primary killed, the old one serving
    ])  # fmt: skip
    result = check([], back, rules=(Timelines,))
    assert result["anomaly_types"] == ["timeline-backwards"]
    assert (
        "only n1 took writes, on timeline 1, after n2 had taken writes on timeline 2"
        in (result["anomalies"][0]["explanation"])
    )
