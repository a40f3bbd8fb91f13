"""The protocol's moments as the polls show them, and the coverage table a run's report gives:
each moment is found where it holds, with who plays which role, and not where it does not."""

from __future__ import annotations

from typing import Any

from checkers.cluster_state import check
from checkers.moments import (
    CatchUp,
    InheritedLimbo,
    KeyTaken,
    LeaderChanged,
    LeaseEnding,
    Rebuild,
    Rejoining,
    StandbyBehind,
    Takeover,
    TermWon,
    coverage,
    occurrences,
    pairs_between,
    reached,
    reached_no_moment,
    steps_reached,
)
from core.history import NEMESIS
from core.polls import (
    ComputePoll,
    LeaderKeyPoll,
    PatroniPoll,
    PeerPoll,
    Record,
    Round,
    SafekeeperPoll,
    encode_round,
)

S = 1_000_000_000


def at(second: float, **nodes: Record) -> Round:
    return Round(time=int(second * S), nodes=nodes)


def keeper(term: int, history: list[list[int]], flush: int = 0, commit: int = 0) -> SafekeeperPoll:
    return SafekeeperPoll(term, history, flush, commit)


def primary(term: int, **more: Any) -> ComputePoll:
    return ComputePoll("primary", True, term, **more)


STANDBY = ComputePoll("standby", False, None)


def test_a_term_won_names_its_voters_the_ones_without_its_record_and_the_deposed() -> None:
    before = at(0, n1=primary(1), n2=STANDBY, n3=keeper(1, [[1, 100]]), n4=keeper(1, [[1, 100]]))
    won = at(
        1,
        n2=ComputePoll("taking over", False, 2),
        n3=keeper(2, [[1, 100], [2, 500]]),
        n4=keeper(2, [[1, 100]]),  # voted in term 2, holds no record of it yet
        n5=keeper(1, [[1, 100]]),
    )
    later = at(2, n2=primary(2), n3=keeper(2, [[1, 100], [2, 500]]), n4=keeper(2, [[2, 500]]))
    found = occurrences([before, won, later], TermWon)
    assert found == [
        {
            "start": 1.0,
            "end": 1.0,
            "roles": {
                "new-leader": ["n2"],
                "voted-not-recorded": ["n4"],
                "voters": ["n3", "n4"],
                "deposed": ["n1"],
            },
        }
    ]


def test_a_term_won_holds_until_its_voters_hold_its_record_naming_a_late_answering_leader() -> None:
    """The round that shows the term rise has no answer from the new leader's compute (a slow
    poll): the moment still holds the next round, which names it, and ends once every voter
    holds the term's first record."""
    before = at(0, n1=primary(1), n3=keeper(1, [[1, 100]]), n4=keeper(1, [[1, 100]]))
    rose = at(1, n3=keeper(2, [[1, 100]]), n4=keeper(2, [[1, 100]]))
    named = at(2, n2=ComputePoll("taking over", False, 2), n3=keeper(2, [[1, 100], [2, 500]]),
               n4=keeper(2, [[1, 100]]))  # fmt: skip
    done = at(3, n2=primary(2), n3=keeper(2, [[2, 500]]), n4=keeper(2, [[2, 500]]))
    observer = TermWon()
    seen = [observer.observe(r) for r in (before, rose, named, done)]
    assert seen[0] is None and seen[3] is None
    assert seen[1] is not None and seen[1]["new-leader"] == [] and seen[1]["deposed"] == ["n1"]
    assert seen[2] == {
        "new-leader": ["n2"],
        "voted-not-recorded": ["n4"],
        "voters": ["n3", "n4"],
        "deposed": ["n1"],
    }
    (found,) = occurrences([before, rose, named, done], TermWon)
    assert (found["start"], found["end"]) == (1.0, 2.0)


def test_the_first_round_is_no_term_won_nor_is_a_term_held_again() -> None:
    rounds = [at(0, n3=keeper(3, [[3, 1]])), at(1, n3=keeper(2, [])), at(2, n3=keeper(3, []))]
    assert occurrences(rounds, TermWon) == []


def test_in_the_epoch_variant_the_announced_epoch_is_the_record() -> None:
    announced = SafekeeperPoll(2, None, 10, 0, epoch=1, proposed_epoch=2, vcl=10)
    not_yet = SafekeeperPoll(2, None, 10, 0, epoch=1, proposed_epoch=1, vcl=5)
    rounds = [at(0, n3=keeper(1, [])), at(1, n3=announced, n4=not_yet)]
    (found,) = occurrences(rounds, TermWon)
    assert found["roles"]["voted-not-recorded"] == ["n4"]


def test_a_takeover_names_the_donor_and_lasts_while_the_compute_takes_over() -> None:
    taking = ComputePoll("taking over", False, 2, donor="n4")
    rounds = [
        at(0, n1=primary(1), n2=STANDBY),
        at(1, n2=taking),
        at(2, n2=taking),
        at(3, n2=primary(2, donor="n4")),
    ]
    assert occurrences(rounds, Takeover) == [
        {
            "start": 1.0,
            "end": 2.0,
            "roles": {"new-leader": ["n2"], "donor": ["n4"], "deposed": ["n1"]},
        }
    ]


def test_a_catch_up_is_a_keeper_of_the_term_below_what_was_already_committed() -> None:
    first = at(0, n1=primary(2), n3=keeper(2, [], 1 << 20, 1 << 20), n4=keeper(2, [], 4096, 0))
    behind = at(1, n1=primary(2), n3=keeper(2, [], 1 << 20, 1 << 20), n4=keeper(2, [], 4096, 0))
    within_a_record = at(
        2, n1=primary(2), n3=keeper(2, [], 1 << 20, 1 << 20), n4=keeper(2, [], (1 << 20) - 5000)
    )
    older_term = at(3, n1=primary(2), n3=keeper(2, [], 1 << 20, 1 << 20), n4=keeper(1, [], 0))
    no_leader = at(4, n3=keeper(2, [], 1 << 20, 1 << 20), n4=keeper(2, [], 0))
    rounds = [first, behind, within_a_record, older_term, no_leader]
    found = occurrences(rounds, CatchUp)
    # the first round has no earlier commit to be behind: the moment shows from the second
    assert found == [
        {
            "start": 1.0,
            "end": 1.0,
            "roles": {"catching-up": ["n4"], "leader": ["n1"], "up-to-date": ["n3"]},
        }
    ]
    assert CatchUp.followers(behind) == ["n3", "n4"]  # a safekeeper is cut off to make one


def test_a_keeper_of_the_quorum_that_answered_first_is_not_catching_up() -> None:
    """Seen in CI under load: n4 was cut off, and n5, of the quorum, answered the round a moment
    before n3 reported a commit some records past n5's flush. Only n4 is behind what the
    round before showed committed."""
    before = at(0, n1=primary(2), n3=keeper(2, [], 500_000, 500_000), n4=keeper(2, [], 400_000))
    later = at(
        1,
        n1=primary(2),
        n3=keeper(2, [], 600_000, 600_000),
        n4=keeper(2, [], 400_000),
        n5=keeper(2, [], 560_000, 560_000),
    )
    assert occurrences([before, later], CatchUp)[0]["roles"] == {
        "catching-up": ["n4"],
        "leader": ["n1"],
        "up-to-date": ["n3", "n5"],
    }


def test_a_rebuild_and_a_limbo_held_for_an_earlier_leader() -> None:
    rebuilding = at(0, n1=ComputePoll("rebuilding", False, None), n2=primary(3))
    assert occurrences([rebuilding], Rebuild)[0]["roles"] == {
        "rebuilding": ["n1"],
        "leader": ["n2"],
    }
    inherited = ComputePoll("primary", False, 3, limbo=2, taking_writes=False)
    own = primary(3, limbo=2, taking_writes=True)  # its own transactions wait: not inherited
    sk = keeper(3, [[3, 100]])
    rounds = [at(0, n1=primary(2)), at(1, n2=inherited, n4=sk, n3=sk), at(2, n2=own)]
    assert [f["roles"] for f in occurrences(rounds, InheritedLimbo)] == [
        {"new-leader": ["n2"], "deposed": ["n1"], "safekeepers": ["n3", "n4"]}
    ]


def test_a_lease_ending_is_a_primary_in_its_last_seconds_of_quorum_silence() -> None:
    sk = keeper(3, [[3, 100]])
    fresh = at(0, n1=primary(3, lease_left=2.9), n2=STANDBY, n3=sk)
    ending = at(1, n1=primary(3, lease_left=1.2), n2=STANDBY, n3=sk, n4=sk)
    over = at(2, n1=ComputePoll("primary", False, 3, lease_left=-0.4), n2=STANDBY)
    gone = at(3, n1=ComputePoll("standby", False, None), n2=primary(4, lease_left=3.0))
    found = occurrences([fresh, ending, over, gone], LeaseEnding)
    assert found == [
        {
            "start": 1.0,
            "end": 2.0,  # past its end too, for as long as it is still the primary
            "roles": {"leaseholder": ["n1"], "standbys": ["n2"], "safekeepers": ["n3", "n4"]},
        }
    ]
    # without a lease (a primary with no other compute to take over) there is no such moment
    assert occurrences([at(0, n1=primary(3))], LeaseEnding) == []


def test_a_leader_changed_is_a_new_node_leading_alone() -> None:
    def peer(writable: bool, generation: int | None = None) -> PeerPoll:
        return PeerPoll("primary" if writable else "sync", writable, generation)

    rounds = [
        at(0, n1=peer(True, 1), n2=peer(False)),
        at(1, n1=peer(True, 1), n2=peer(True, 2)),  # two lead: not yet a change
        at(2, n2=peer(True, 2)),
        at(3, n2=peer(True, 2)),
    ]
    assert [(f["start"], f["roles"]) for f in occurrences(rounds, LeaderChanged)] == [
        (2.0, {"new-leader": ["n2"], "deposed": ["n1"]})
    ]


def nemesis_op(second: float, f: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "process": NEMESIS,
        "type": "info",
        "f": f,
        "value": value,
        "invoke_time": int(second * S),
        "complete_time": int(second * S),
        "invoke_index": int(second * 10),
    }


TAKEOVER_ROUNDS = [
    at(0, n1=primary(1), n2=STANDBY),
    at(10, n2=ComputePoll("taking over", False, 2, donor="n3")),
    at(11, n2=ComputePoll("taking over", False, 2, donor="n3")),
    at(12, n2=primary(2)),
]


def test_coverage_counts_what_was_reached_and_what_struck_while_it_held() -> None:
    ops = [
        nemesis_op(5, "start-partition", {"shape": "primaries"}),  # before: it caused it
        nemesis_op(11.5, "start-kill", {"targets": ["n2"]}),  # while it held (a poll apart)
        # began long before, watched, struck while it held
        nemesis_op(1, "start-aimed", {"struck_s": 9.5, "strike": {"fault": "pause"}}),
        nemesis_op(30, "start-pause", {}),  # long after
        nemesis_op(
            10.2,
            "start-aimed",
            {
                "moment": "takeover",
                "role": "donor",
                "strike": {"fault": "power"},
                "provoke": "leader",
                "provocation": "partition",
            },
        ),
        nemesis_op(
            40,
            "start-aimed",
            {
                "moment": "takeover",
                "role": "donor",
                "strike": {"fault": "power"},
                "provoke": "leader-back",
                "provocation": "kill",
            },
        ),
    ]
    table = coverage(TAKEOVER_ROUNDS, [Takeover, Rebuild], ops)
    assert table[0] | {"about": ""} == {
        "moment": "takeover",
        "about": "",
        "reached": 1,
        "first_s": 10.0,
        "struck": {"kill": 1, "pause": 1, "power": 1},
        "aimed": {
            "power on donor, the leader cut off": 1,
            "power on donor, the leader killed and back": 1,
        },
    }
    assert table[1]["reached"] == 0 and table[1]["struck"] == {} and table[1]["aimed"] == {}
    assert reached(table, "takeover") == 2 and reached(table, "rebuild") == 0  # two strikes
    assert reached(table, "no-such-moment") == 0


def test_an_aimed_strike_counts_as_reached_though_the_polls_missed_it() -> None:
    ops = [
        nemesis_op(
            3,
            "start-aimed",
            {
                "moment": "rebuild",
                "strike": {"fault": "kill"},
                "role": "leader",
                "provoke": "follower",
            },
        )
    ]
    table = coverage(TAKEOVER_ROUNDS, [Rebuild], ops)
    assert table[0]["reached"] == 0 and reached(table, "rebuild") == 1
    assert table[0]["aimed"] == {"kill on leader, a follower cut off": 1}


def test_the_cluster_state_checker_gives_the_table_beside_its_verdict(tmp_path: Any) -> None:
    polls = tmp_path / "cluster.jsonl"
    polls.write_bytes(b"\n".join(encode_round(r) for r in TAKEOVER_ROUNDS) + b"\n")
    result = check([], str(polls), rules=(), moments=(Takeover,))
    assert result["valid"] and [m["moment"] for m in result["moments"]] == ["takeover"]
    assert result["moments"][0]["reached"] == 1
    assert check([], str(polls), rules=())["moments"] == []


def test_the_deposed_primary_standing_again_is_not_the_new_leader() -> None:
    before = at(0, n1=primary(1), n2=STANDBY, n3=keeper(1, [[1, 100]]))
    candidate = ComputePoll("candidate", False, None)
    won = at(1, n1=candidate, n2=candidate, n3=keeper(2, [[1, 100]]))
    (found,) = occurrences([before, won], TermWon)
    assert found["roles"]["new-leader"] == ["n2"] and found["roles"]["deposed"] == ["n1"]
    elected = at(1, n1=candidate, n2=ComputePoll("taking over", False, 2), n3=keeper(2, []))
    (found,) = occurrences([before, elected], TermWon)
    assert found["roles"]["new-leader"] == ["n2"]


def test_a_leader_key_taken_and_a_member_rejoining_on_an_older_timeline() -> None:
    def member(writable: bool, timeline: int) -> PatroniPoll:
        return PatroniPoll(standby=not writable, writable=writable, timeline=timeline)

    rounds = [
        at(0, n1=member(True, 1), n2=member(False, 1), zookeeper=LeaderKeyPoll("n1", 30)),
        at(1, n2=member(False, 1), zookeeper=LeaderKeyPoll(None, 30)),  # expired, none yet
        at(2, n2=member(True, 2), n3=member(False, 1), zookeeper=LeaderKeyPoll("n2", 30)),
        at(
            3,
            n1=member(False, 1),
            n2=member(True, 2),
            n3=member(False, 2),
            zookeeper=LeaderKeyPoll("n2", 30),
        ),
        at(4, n1=member(False, 2), n2=member(True, 2), zookeeper=LeaderKeyPoll("n2", 30)),
    ]
    assert [(f["start"], f["roles"]) for f in occurrences(rounds, KeyTaken)] == [
        (2.0, {"new-leader": ["n2"], "deposed": ["n1"]})
    ]
    assert [(f["start"], f["end"], f["roles"]) for f in occurrences(rounds, Rejoining)] == [
        (2.0, 3.0, {"rejoining": ["n3"], "leader": ["n2"]})
    ]
    assert KeyTaken.watch_s > TermWon.watch_s  # a key of tens of seconds must expire first


def test_a_follower_cut_off_to_bring_a_moment_about_is_a_node_not_the_leader_key() -> None:
    """On Patroni a round holds the leader key beside the members; an aimed fault that cut
    off the last "follower" of the sorted names cut off `zookeeper`, which no node is, and
    its partition was empty."""
    member = PatroniPoll(standby=True, writable=False, timeline=1)
    leader = PatroniPoll(standby=False, writable=True, timeline=1)
    r = at(0, n1=leader, n2=member, n3=member, zookeeper=LeaderKeyPoll("n1", 30))
    assert StandbyBehind.followers(r) == ["n2", "n3"]


def step(moment: str, role: str, strike: str, reached: bool = True) -> dict[str, Any]:
    struck = {"targets": ["n2"]} if reached else {}
    return {"moment": moment, "role": role, "strike": strike, "reached": reached} | struck


def test_the_steps_and_pairs_a_run_reached_are_counted_up_to_where_each_chain_ended() -> None:
    """A chain counts its steps while each reached its moment and struck; a pair is a step and
    the next of its chain. A step whose moment never came ends the chain: it and what follows
    count for nothing, though the table says which it was."""
    won, taken = step("term-won", "new-leader", "kill"), step("takeover", "deposed", "pause")
    ops = [
        nemesis_op(5, "start-aimed", {"fault": "aimed", "steps": [won, taken]}),
        nemesis_op(
            20,
            "start-aimed",
            {"fault": "aimed", "steps": [won, step("catch-up", "catching-up", "kill", False)]},
        ),
        nemesis_op(40, "start-aimed", {"fault": "aimed", "steps": [won, taken, won]}),
        nemesis_op(50, "start-kill", {"fault": "kill"}),  # not aimed: no step
        nemesis_op(51, "stop-aimed", {"fault": "aimed", "moment": "takeover"}),  # its end
        # written before chains: one step, from its moment, role and strike
        nemesis_op(
            60,
            "start-aimed",
            {
                "fault": "aimed",
                "moment": "rebuild",
                "roles_tried": ["leader", "rebuilding"],
                "role": "leader",
                "strike_with": "restart",
                "reached": True,
                "strike": {"fault": "restart", "targets": ["n1"]},
            },
        ),
    ]
    found = steps_reached(ops)
    assert found["chains"] == 4
    assert found["steps"] == {
        "rebuild:leader:restart": 1,
        "takeover:deposed:pause": 2,
        "term-won:new-leader:kill": 4,
    }
    assert found["pairs"] == {
        "takeover:deposed:pause > term-won:new-leader:kill": 1,
        "term-won:new-leader:kill > takeover:deposed:pause": 2,
    }
    assert found["tried"][1] == {
        "at_s": 20.0,
        "steps": ["term-won:new-leader:kill", "catch-up:catching-up:kill (not reached)"],
    }
    assert pairs_between(found["pairs"], "term-won", "takeover") == 2
    assert pairs_between(found["pairs"], "takeover", "term-won") == 1
    assert pairs_between(found["pairs"], "term-won", "catch-up") == 0
    assert steps_reached([])["steps"] == {}


def test_a_seeds_history_counts_its_phases_as_a_chains_steps() -> None:
    """Seed 003's history placed as the cluster elects (a partition fault, not an aimed one)
    records each phase as a step: the moment that began it and the part it cut off. Its steps
    and pairs are counted as a chain's; one whose condition never held ends it."""
    phases = [
        step("serving", "leader", "partition-tail"),
        step("term-won", "voted-not-recorded", "partition-split"),
        step("recorded", "new-leader", "partition-apart", False),
    ]
    value = {"fault": "partition", "shape": "seed003", "steps": phases}
    found = steps_reached([nemesis_op(5, "start-partition", value)])
    assert found["chains"] == 1
    assert found["pairs"] == {
        "serving:leader:partition-tail > term-won:voted-not-recorded:partition-split": 1
    }
    assert found["tried"][0]["steps"][-1] == "recorded:new-leader:partition-apart (not reached)"
    # a partition of the schedule's own says no steps: no chain
    plain = nemesis_op(9, "start-partition", {"fault": "partition", "shape": "majority"})
    assert steps_reached([plain])["chains"] == 0


def test_a_run_with_faults_that_reached_no_moment_tested_nothing() -> None:
    assert reached_no_moment(["pause-primary", "clock"], [0, 0])
    assert not reached_no_moment(["pause-primary"], [0, 1])
    assert not reached_no_moment(["none"], [0, 0])  # no faults: nothing was meant to fail over
    assert not reached_no_moment(["kill"], [])  # a kind that declares no moment
