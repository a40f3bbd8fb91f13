"""The cluster's own polls held to its promises: one serving compute at a time, and no term that
starts below WAL already committed. The numbers of the second case are a run's with
`--bug recover-lowest` (n4 had reported 0/5046C00 committed; term 4 started at 0/50455F0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkers import cluster_state
from checkers.cluster_state import check, divergence, inherited_rolled_back
from checkers.cluster_state import check as plain_check
from checkers.spark.cluster_state import check as fed_check
from core.polls import COORDINATION, ComputePoll, Round, read_rounds, record_of
from tests.unit.conftest import MS, both_ways

S = 1_000_000_000
RECORD = 0x28  # a WAL record's length, as the first of a term


def analyse(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Every rule's verdict on rounds written as a polls file holds them (each node's entry
    read as the record whose fields it has, as a run's file from before records were named)."""
    typed = [
        Round(
            time=r["time"],
            begun=r.get("begun"),
            nodes={n: record_of(s) for n, s in r["nodes"].items()},
        )
        for r in rounds
    ]
    return cluster_state.analyse(typed)


def compute(serving: bool, term: int | None, role: str = "primary") -> dict:
    return {"role": role, "serving": serving, "term": term}


def safekeeper(term: int, history: list[list[int]], commit: int, flush: int = 0) -> dict:
    """A safekeeper's poll; its WAL ends at `flush`, by default at the commit position or, if
    its last term starts there, at that term's first record (it reports only terms it holds)."""
    held = max(commit, history[-1][1] + RECORD) if history else commit
    return {"term": term, "history": history, "commit_lsn": commit, "flush_lsn": flush or held}


def test_one_serving_compute_at_a_time_is_valid_and_its_takeovers_listed() -> None:
    rounds = [
        {"time": 1 * S, "nodes": {"n1": compute(True, 1), "n2": compute(False, None, "standby")}},
        {"time": 2 * S, "nodes": {"n2": compute(False, None, "standby")}},  # n1 cut off
        {"time": 9 * S, "nodes": {"n1": compute(False, None, "candidate"), "n2": compute(True, 2)}},
    ]
    result = analyse(rounds)
    assert result["valid"] is True and result["rounds"] == 3
    assert result["takeovers"] == [
        {"time_s": 1.0, "node": "n1", "term": 1},
        {"time_s": 9.0, "node": "n2", "term": 2},
    ]


def test_the_leader_lane_cuts_the_run_where_the_leader_or_its_term_changes() -> None:
    rounds = [
        {"time": 1 * S, "nodes": {"n1": compute(True, 1), "n2": compute(False, None, "standby")}},
        {"time": 2 * S, "nodes": {"n1": compute(True, 1)}},  # n2 silent: the same leader
        {"time": 3 * S, "nodes": {"n2": compute(False, None, "standby")}},  # nobody leads
        {"time": 9 * S, "nodes": {"n2": compute(True, 2)}},
        {"time": 12 * S, "nodes": {"n2": compute(True, 3)}},  # re-elected: a new term
    ]
    assert analyse(rounds)["leaders"] == [
        {"start": 1.0, "end": 3.0, "nodes": ["n1"], "term": 1, "unit": "term"},
        {"start": 3.0, "end": 9.0, "nodes": [], "term": None, "unit": "term"},
        {"start": 9.0, "end": 12.0, "nodes": ["n2"], "term": 2, "unit": "term"},
        {"start": 12.0, "end": None, "nodes": ["n2"], "term": 3, "unit": "term"},
    ]


def test_manatee_peers_lead_in_generations_and_a_deposed_primary_shows_with_its_own() -> None:
    """A Manatee peer that takes writes says in which generation it was made primary: the lane
    names generations, and an old primary still writable beside the new one shows with its
    old generation (not an anomaly of the kind: the checkers judge its effect on the history)."""

    def peer(writable: bool, generation: int | None) -> dict[str, Any]:
        return {"role": "primary", "writable": writable, "generation": generation}

    rounds = [
        {"time": 1 * S, "nodes": {"n1": peer(True, 1), "n2": peer(False, None)}},
        {"time": 7 * S, "nodes": {"n1": peer(True, 1), "n2": peer(True, 2)}},
        {"time": 9 * S, "nodes": {"n2": peer(True, 2)}},
    ]
    result = analyse(rounds)
    assert result["valid"] is True
    assert [(s["nodes"], s["term"], s["unit"]) for s in result["leaders"]] == [
        (["n1"], 1, "generation"), (["n1", "n2"], 2, "generation"), (["n2"], 2, "generation"),
    ]  # fmt: skip
    assert [(t["node"], t["term"]) for t in result["takeovers"]] == [("n1", 1), ("n2", 2)]


def test_writable_nodes_lead_without_a_term_and_two_are_no_anomaly() -> None:
    """Tarantool's kind says which nodes take writes: the lane and the takeovers show them; two
    at once is the failover procedure's known weakness, which the run's checkers judge by its
    effect on the history, not a promise of the kind."""
    rounds = [
        {"time": 1 * S, "nodes": {"n1": {"writable": True}, "n2": {"writable": False}}},
        {"time": 5 * S, "nodes": {"n1": {"writable": True}, "n2": {"writable": True}}},
        {"time": 6 * S, "nodes": {"n1": {"writable": False}, "n2": {"writable": True}}},
    ]
    result = analyse(rounds)
    assert result["valid"] is True
    assert [s["nodes"] for s in result["leaders"]] == [["n1"], ["n1", "n2"], ["n2"]]
    assert [(t["node"], t["term"]) for t in result["takeovers"]] == [("n1", None), ("n2", None)]


def test_two_computes_serving_at_once_are_two_primaries() -> None:
    rounds = [
        {"time": 1 * S, "nodes": {"n1": compute(True, 5), "n2": compute(True, 6)}},
        {"time": 2 * S, "nodes": {"n1": compute(True, 5), "n2": compute(True, 6)}},  # same episode
        {"time": 3 * S, "nodes": {"n1": compute(False, None), "n2": compute(True, 6)}},
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["two-primaries"]
    (anomaly,) = result["anomalies"]
    assert anomaly["nodes"] == ["n1", "n2"]
    assert "n1 (term 5), n2 (term 6) each said it serves clients" in anomaly["explanation"]


def test_a_term_started_below_committed_wal_is_found() -> None:
    h3 = [[1, 0x1000000], [2, 0x30BDEA0], [3, 0x30F5138]]
    rounds = [
        {
            "time": 60 * S,
            "nodes": {
                "n3": safekeeper(3, h3, 0x5046000, 0x5047000),
                "n4": safekeeper(3, h3, 0x5046C00),
                "n5": safekeeper(3, h3, 0x50455F0, 0x5047000),
            },
        },
        {
            "time": 62 * S,
            "nodes": {
                "n3": safekeeper(4, [*h3, [4, 0x50455F0]], 0x5046000, 0x5050000),
                "n4": safekeeper(4, h3, 0x5046C00),  # refused to truncate
                "n5": safekeeper(4, [*h3, [4, 0x50455F0]], 0x50455F0, 0x5050000),
            },
        },
    ]
    result = analyse(rounds)
    # n4 and n3 both hold 0/5046000 committed, and say different terms wrote 0/50455F0 onward
    assert result["anomaly_types"] == ["histories-disagree", "term-below-commit"]
    below = next(a for a in result["anomalies"] if a["type"] == "term-below-commit")
    assert below["explanation"].startswith(
        "term 4 starts at 0/50455F0 (n3's term history at 62.0 s), below 0/5046C00, which n4 "
        "reported committed at 60.0 s"
    )
    assert result["max_term"] == 4 and result["terms_seen"] == 4


def test_a_term_that_starts_at_the_committed_wal_or_past_it_is_valid() -> None:
    h = [[1, 0x1000000]]
    rounds = [
        {"time": 1 * S, "nodes": {"n3": safekeeper(1, h, 0x2000000)}},
        {"time": 2 * S, "nodes": {"n3": safekeeper(2, [*h, [2, 0x2000000]], 0x2100000)}},
        # the new term's own commits come with its entry: never compared with its start
        {
            "time": 3 * S,
            "nodes": {"n3": safekeeper(3, [*h, [2, 0x2000000], [3, 0x2200000]], 0x2300000)},
        },
    ]
    assert analyse(rounds)["valid"] is True


def epoch_keeper(term: int, announced: int, vcl: int, commit: int, flush: int) -> dict:
    """A safekeeper of the epoch variant: no term history, the term last announced and its VCL."""
    return {
        "term": term,
        "history": [],
        "commit_lsn": commit,
        "flush_lsn": flush,
        "epoch": 1,
        "proposed_epoch": announced,
        "vcl": vcl,
    }


def test_an_epoch_term_whose_vcl_is_below_committed_wal_starts_below_commit() -> None:
    """Seed 003 on the epoch variant: term 3 wins the corrupted safekeeper's longer log and
    commits it (0/3002000); term 4's donor has a higher epoch and a shorter log (0/3000800)."""
    rounds = [
        {
            "time": 1 * S,
            "nodes": {
                "n3": epoch_keeper(3, 3, 0x3002000, 0x3002000, 0x3002000),
                "n4": epoch_keeper(3, 3, 0x3002000, 0x3002000, 0x3002000),
            },
        },
        {
            "time": 2 * S,
            "nodes": {
                "n3": epoch_keeper(4, 3, 0x3002000, 0x3002000, 0x3002000),
                "n4": epoch_keeper(4, 3, 0x3002000, 0x3002000, 0x3002000),
                "n6": epoch_keeper(4, 4, 0x3000800, 0x3000800, 0x3000900),
            },
        },
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["term-below-commit"]
    assert result["anomalies"][0]["explanation"].startswith(
        "term 4 starts at 0/3000800 (n6's announced VCL at 2.0 s), below 0/3002000, which n3 "
        "reported committed at 1.0 s"
    )


def test_epoch_terms_that_start_at_committed_wal_are_valid_and_a_vcl_of_zero_is_no_start() -> None:
    rounds = [
        {"time": 1 * S, "nodes": {"n3": epoch_keeper(1, 0, 0, 0, 0)}},  # before any announcement
        {"time": 2 * S, "nodes": {"n3": epoch_keeper(1, 1, 0x1000000, 0x1000100, 0x1000100)}},
        {"time": 3 * S, "nodes": {"n3": epoch_keeper(2, 2, 0x1000100, 0x1000200, 0x1000200)}},
    ]
    result = analyse(rounds)
    assert result["valid"] is True and result["terms_seen"] == 2


def test_the_polls_file_is_read_up_to_a_line_cut_off_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "cluster.jsonl"
    path.write_text('{"time": 1, "nodes": {"n1": {"serving": true}}}\n{"time": 2, "nod')
    assert read_rounds(path) == [Round(time=1, nodes={"n1": ComputePoll(serving=True)})]
    assert check(None, str(path))["rounds"] == 1
    empty = check(None, None)
    assert (empty["valid"], empty["anomalies"], empty["rounds"]) == (True, [], 0)


def test_two_starts_of_one_term_are_two_leaders() -> None:
    rounds = [
        {"time": 1 * S, "nodes": {"n3": safekeeper(5, [[5, 0x3000000]], 0x3000000)}},
        {"time": 2 * S, "nodes": {"n4": safekeeper(5, [[5, 0x3000100]], 0x3000000)}},
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["two-leaders-in-term"]
    assert (
        "term 5 starts at 0/3000000 in n3's term history" in result["anomalies"][0]["explanation"]
    )


def test_histories_that_name_other_writers_below_what_both_hold_committed_disagree() -> None:
    rounds = [
        {
            "time": 7 * S,
            "nodes": {
                "n3": safekeeper(2, [[1, 0x1000000], [2, 0x2000000]], 0x2400000),
                "n4": safekeeper(3, [[1, 0x1000000], [3, 0x2000000]], 0x2300000, 0x2500000),
                "n5": safekeeper(3, [[1, 0x1000000], [3, 0x2000000]], 0x2300000),
            },
        },
        {
            "time": 8 * S,
            "nodes": {
                "n3": safekeeper(2, [[1, 0x1000000], [2, 0x2000000]], 0x2400000),
                "n4": safekeeper(3, [[1, 0x1000000], [3, 0x2000000]], 0x2300000),
            },
        },
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["histories-disagree"]
    assert [a["nodes"] for a in result["anomalies"]] == [["n3", "n4"], ["n3", "n5"]]  # once each
    assert result["anomalies"][0]["explanation"] == (
        "at 7.0 s n3's term history says term 2 wrote from 0/2000000 and n4's says term 3 wrote "
        "from 0/2000000, below 0/2300000, which both held and both had been told was committed: "
        "the committed log is not one"
    )


def test_histories_agree_past_empty_terms_and_may_differ_above_what_both_hold() -> None:
    h = [[1, 0x1000000], [4, 0x2000000]]
    rounds = [
        {
            "time": 1 * S,
            "nodes": {
                # term 3 was won at 0/2000000 and wrote nothing before term 4: n3 keeps it
                "n3": safekeeper(4, [[1, 0x1000000], [3, 0x2000000], *h[1:]], 0x2100000),
                "n4": safekeeper(4, h, 0x2100000),
                # a lagging safekeeper: its own tail of term 2 lies above its commit position
                "n5": safekeeper(2, [[1, 0x1000000], [2, 0x1F00000]], 0x1F00000, 0x2080000),
            },
        },
        # n5 is caught up: its tail is cut and term 4's records written
        {"time": 2 * S, "nodes": {"n5": safekeeper(4, h, 0x2100000)}},
    ]
    assert analyse(rounds)["valid"] is True


def test_a_history_naming_a_term_at_or_past_the_end_of_the_wal_claims_what_it_lacks() -> None:
    h = [[1, 0x1000000], [3, 0x2000000]]
    rounds = [
        {
            "time": 4 * S,
            "nodes": {
                "n3": safekeeper(3, h, 0x2100000),
                # announced term 3 while 0x1000 short of its start: term 3 is not its log's yet
                "n4": safekeeper(3, h, 0x1FFF000, 0x1FFF000),
                # its WAL ends exactly where term 3 starts: not one record of term 3 either
                "n5": safekeeper(3, h, 0x2000000, 0x2000000),
            },
        },
        {"time": 5 * S, "nodes": {"n4": safekeeper(3, h, 0x1FFF000, 0x1FFF000)}},
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["history-beyond-log"]
    assert [a["nodes"] for a in result["anomalies"]] == [["n4"], ["n5"]]  # once each
    assert result["anomalies"][0]["explanation"] == (
        "at 4.0 s n4's term history names term 3 from 0/2000000, but its WAL ends at 0/1FFF000: "
        "it claims a term it holds no record of, and a proposer ranks its log by the last term "
        "it claims, so a log without that term's WAL may be elected as the term's"
    )


def test_a_history_of_terms_each_with_a_record_in_the_wal_is_held() -> None:
    rounds = [
        {
            "time": 1 * S,
            "nodes": {
                "n3": safekeeper(3, [[1, 0x1000000], [3, 0x2000000]], 0x2000000, 0x2000001),
                # a lagging safekeeper reports the history it holds, without the announced term
                "n4": safekeeper(3, [[1, 0x1000000]], 0x1FFF000),
                # the epoch variant keeps no history
                "n5": {"term": 3, "epoch": 2, "flush_lsn": 0x2000000, "commit_lsn": 0x2000000},
            },
        },
    ]
    assert analyse(rounds)["valid"] is True


def test_a_term_that_goes_down_was_not_durable() -> None:
    h = [[1, 0x1000000]]
    rounds = [
        {"time": 1 * S, "nodes": {"n3": safekeeper(7, h, 0x1000000)}},
        {"time": 9 * S, "nodes": {"n3": safekeeper(6, h, 0x1000000)}},  # after a power loss
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["term-backwards"]
    assert (
        "n3's term went from 7 (1.0 s) down to 6 (9.0 s)" in result["anomalies"][0]["explanation"]
    )


def test_a_commit_no_quorum_holds_is_beyond_the_quorum() -> None:
    h = [[1, 0x1000000]]
    lost = {
        "n3": safekeeper(1, h, 0x2000000, flush=0x2000000),
        "n4": safekeeper(1, h, 0x1800000, flush=0x1800000),  # its unsynced tail lost power
        "n5": safekeeper(1, h, 0x1800000, flush=0x1800000),
    }
    before = {n: safekeeper(1, h, 0x1000000, flush=0x2000000) for n in ("n4", "n5")}
    result = analyse([{"time": 3 * S, "nodes": lost | before}, {"time": 4 * S, "nodes": lost}])
    assert result["anomaly_types"] == ["commit-beyond-quorum"]
    assert len(result["anomalies"]) == 1
    assert (
        "n3 reported 0/2000000 committed at 3.0 s, but at 4.0 s no quorum"
        in (result["anomalies"][0]["explanation"])
    )


def test_a_commit_is_held_to_the_flushes_polled_after_it() -> None:
    """One poll's answers are milliseconds apart: a commit may pass flushes read before it."""
    h = [[1, 0x1000000]]
    first = {"n3": safekeeper(2, h, 0x5018E78, flush=0x5018F30),
             "n4": safekeeper(2, h, 0x5018DC0), "n5": safekeeper(2, h, 0x5018DC0)}  # fmt: skip
    then = {n: safekeeper(2, h, 0x5018E78, flush=0x5019000) for n in ("n3", "n4", "n5")}
    assert analyse([{"time": 1 * S, "nodes": first}, {"time": 2 * S, "nodes": then}])["valid"]


def test_a_safekeeper_that_does_not_answer_may_hold_the_commit() -> None:
    h = [[1, 0x1000000]]
    seen = {"n3": safekeeper(1, h, 0x2000000, flush=0x2000000),
            "n4": safekeeper(1, h, 0x1800000, flush=0x1800000)}  # fmt: skip
    first = {"time": 1 * S, "nodes": seen | {"n5": safekeeper(1, h, 0x2000000, 0x2000000)}}
    paused = {"time": 2 * S, "nodes": seen}
    assert analyse([first, paused])["valid"] is True


def test_two_primaries_while_safekeepers_are_polled_too() -> None:
    h = [[1, 0x1000000]]
    sk = safekeeper(2, h, 0x1000000)
    round_ = {"n1": compute(True, 1), "n2": compute(True, 2), "n3": sk, "n4": sk, "n5": sk}
    assert analyse([{"time": 1 * S, "nodes": round_}])["anomaly_types"] == ["two-primaries"]


def test_ranges_a_safekeeper_holds_only_in_part_are_not_compared() -> None:
    digests = {
        "n3": [[0, 100, "aa"], [100, 200, "bb"]],
        "n4": [[0, 100, "aa"], [100, 150, "cc"]],  # its log ends inside the second range
    }
    assert divergence({"commit_lsn": 200, "digests": digests}) == []
    digests["n4"][0][2] = "zz"
    (found,) = divergence({"commit_lsn": 200, "digests": digests})
    assert found["lsn_range"] == [0, 100] and "(n3 | n4)" in found["explanation"]


# Term 2's log starts at 0x3000, but its leader's Postgres began writing at 0x3400: its log opens
# with a tail the same compute's Postgres wrote in term 1, which the quorum had not yet taken.
TWO_TERMS = [[1, 0x1000], [2, 0x3000]]
BEGAN = [0x3400, "boundary", None, None]


def _log(*records: list[Any]) -> dict[str, Any]:
    return {"node": "n3", "from_lsn": 0x1000, "to_lsn": 0x9000, "history": TWO_TERMS,
            "records": sorted(list(r) for r in records)}  # fmt: skip


def test_a_new_leader_rolling_back_what_it_inherited_is_named() -> None:
    read = _log([0x2000, "prepare", 700, "h-old"], BEGAN, [0x3500, "abort", 700, None])
    (found,), counted = inherited_rolled_back(read)
    assert found["type"] == "inherited-rolled-back" and found["lsn_range"] == [0x2000, 0x3500]
    said = found["explanation"]
    assert "transaction 700 (gid h-old) at 0/3500 (in term 2's log)" in said
    assert "the Postgres that began at 0/3400" in said and "0/2000 (in term 1's log)" in said
    assert counted["inherited_rolled_back"] == 1 and counted["rolled_back"] == 1


def test_a_rollback_in_the_tail_a_term_took_from_its_leader_s_last_postgres_is_that_one_s() -> None:
    # seen on the correct cluster (confirm-rollback, `all`, seed 0): n2 led term 4, rolled back
    # its own transactions after 2 s without a quorum, and won term 5 with a VCL below those
    # rollbacks; term 5's log took them from n2's WAL before its new Postgres began
    read = _log([0x2000, "prepare", 700, "h-own"], [0x3100, "abort", 700, None], BEGAN)
    assert inherited_rolled_back(read)[0] == []
    # a PREPARE in that tail is inherited all the same
    read = _log([0x3100, "prepare", 701, "h-tail"], BEGAN, [0x3500, "abort", 701, None])
    assert [f["xid"] for f in inherited_rolled_back(read)[0]] == [701]


def test_what_a_leader_inherits_and_confirms_or_rolls_back_of_its_own_is_valid() -> None:
    read = _log(
        [0x1100, "prepare", 650, "h-own"],
        [0x1200, "abort", 650, None],  # term 1 rolls back its own
        [0x2000, "prepare", 700, "h-inherited"],
        BEGAN,
        [0x3500, "commit", 700, None],  # term 2 confirms what it inherited
        [0x3600, "prepare", 710, "h-own-2"],
        [0x3700, "abort", 710, None],  # term 2 rolls back its own
    )
    found, counted = inherited_rolled_back(read)
    assert found == []
    assert counted | {"upto_lsn": None} == {
        "prepared": 3, "confirmed": 1, "rolled_back": 2, "unmatched": 0, "instances": 2,
        "inherited_rolled_back": 0, "upto_lsn": None,
    }  # fmt: skip


def test_a_rollback_whose_prepare_was_not_read_proves_nothing() -> None:
    found, counted = inherited_rolled_back(_log(BEGAN, [0x3500, "abort", 699, None]))
    assert found == [] and counted["unmatched"] == 1


def test_the_rule_reads_the_decoded_log_from_the_end_of_run_evidence(tmp_path: Path) -> None:
    digests = tmp_path / "wal-digests.json"
    read = _log([0x2000, "prepare", 700, "h-old"], BEGAN, [0x3500, "abort", 700, None])
    read["history"] = []  # the epoch variant keeps no term history: instances still tell
    digests.write_text(json.dumps({"digests": {}, "transactions": read}))
    rules = [cluster_state.RULES["inherited-confirmed"]]
    result = plain_check([], digests=str(digests), rules=rules)
    assert result["anomaly_types"] == ["inherited-rolled-back"]
    assert "(in term" not in result["anomalies"][0]["explanation"]
    assert result["log_decisions"]["prepared"] == 1
    digests.write_text(json.dumps({"digests": {}}))  # durable runs decode no log
    assert plain_check([], digests=str(digests), rules=rules)["valid"]


def _written(write_history: Any, events: list[tuple[int, dict[str, Any]]]) -> Path:
    """A history file of (ms, event) pairs, in time order."""
    events = sorted(events, key=lambda e: e[0])
    return write_history([{"index": i, "time": at * MS, **e} for i, (at, e) in enumerate(events)])


def _manatee_run(tmp_path: Path, write_history: Any, third_starts_ms: int) -> tuple[Path, Path]:
    """n1 primary of generation 1; from 6 s n2 too, of generation 2 (n1 deposed but still
    writable); adds acknowledged through n1, then n2, then n1 again."""

    def peer(writable: bool, generation: int | None) -> dict[str, Any]:
        return {"role": "primary", "writable": writable, "generation": generation}

    polls = tmp_path / "cluster.jsonl"
    rounds = [
        {"time": 1 * S, "nodes": {"n1": peer(True, 1), "n2": peer(False, None)}},
        {"time": 6 * S, "nodes": {"n1": peer(True, 1), "n2": peer(True, 2)}},
    ]
    polls.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    adds = [(0, "n1", 2000, 2100), (1, "n2", 7000, 7100), (2, "n1", third_starts_ms, 8500)]
    events = []
    for process, node, start, end in adds:
        base = {"process": process, "f": "add", "value": process, "node": node}
        events += [(start, {**base, "type": "invoke"}), (end, {**base, "type": "ok"})]
    return _written(write_history, events), polls


def test_a_deposed_primary_acknowledging_after_the_next_generation_did_is_an_anomaly(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    history, polls = _manatee_run(tmp_path, write_history, third_starts_ms=8000)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["anomaly_types"] == ["deposed-primary-acknowledged"]
    (anomaly,) = result["anomalies"]
    assert [op["node"] for op in anomaly["ops"]] == ["n2", "n1"]
    assert "n1, primary of generation 1, acknowledged" in anomaly["explanation"]
    assert "in generation 2" in anomaly["explanation"]


def test_a_write_that_began_before_the_next_generation_acknowledged_any_is_not(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    history, polls = _manatee_run(tmp_path, write_history, third_starts_ms=6500)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True, result["anomalies"]


def _duel_run(tmp_path: Path, write_history: Any, rises: dict[int, int]) -> tuple[Path, Path]:
    """Polls each second for 60 s of a cluster whose term rises by `rises[t]` at second t;
    a kill from 10 s to 20 s; one acknowledged add a second."""
    polls, term, rounds = tmp_path / "cluster.jsonl", 1, []
    for t in range(1, 61):
        term += rises.get(t, 0)
        rounds.append({"time": t * S, "nodes": {"n3": safekeeper(term, [[1, 0]], 0)}})
    polls.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    events: list[tuple[int, dict[str, Any]]] = []
    for f, at in (("start-kill", 10_000), ("stop-kill", 20_000)):
        base = {"process": "nemesis", "f": f, "value": {"fault": "kill", "target": "one"}}
        events += [(at, {**base, "type": "invoke"}), (at + 100, {**base, "type": "info"})]
    for i in range(60):
        base = {"process": i % 4, "f": "add", "value": i, "node": "n1"}
        events += [
            (i * 1000 + 1, {**base, "type": "invoke"}),
            (i * 1000 + 5, {**base, "type": "ok"}),
        ]
    return _written(write_history, events), polls


def test_terms_that_keep_rising_while_nothing_fails_are_duelling_proposers(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    """The shape of `--bug deposed-primary-serves` at seed 0: two computes deposing each other,
    two terms a second, long after the last fault healed."""
    rises = {t: 2 for t in range(35, 41)}
    history, polls = _duel_run(tmp_path, write_history, rises)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["anomaly_types"] == ["elections-without-faults"]
    (anomaly,) = result["anomalies"]
    assert anomaly["elections"] == 12 and anomaly["window_ns"] == [34 * S, 40 * S]
    assert "the last fault healed at 20.1 s" in anomaly["explanation"]
    assert "12 terms began" in anomaly["explanation"]


def test_elections_under_a_fault_or_right_after_it_or_few_are_no_anomaly(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    """Twelve terms during the kill and in the 10 s after its heal (a fault's aftermath), and
    one election every ten seconds later on: five in any twenty seconds at most."""
    rises = {t: 2 for t in range(11, 17)} | {t: 1 for t in range(21, 30)} | {35: 1, 45: 1, 55: 1}
    history, polls = _duel_run(tmp_path, write_history, rises)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True, result["anomalies"]


def _powered_run(
    tmp_path: Path, write_history: Any, *after: dict[str, int | None]
) -> tuple[Path, Path]:
    """Three safekeepers hold WAL to 1000 while adds are acknowledged, each past 100·i; at
    the polls sent at 9.5 s (and each second after) their flush positions are those of
    `after` (None: no answer). The last add is acknowledged at 9.7 s, after the first of those
    polls was sent, and held to no poll."""
    polls = tmp_path / "cluster.jsonl"
    before = {n: safekeeper(1, [[1, 0]], 100, 1000) for n in ("n3", "n4", "n5")}
    rounds = [{"time": 5 * S, "begun": 5 * S - 20 * MS, "nodes": before}]
    for k, flushes in enumerate(after):
        later = {n: safekeeper(1, [[1, 0]], 100, f) for n, f in flushes.items() if f is not None}
        rounds.append({"time": (10 + k) * S, "begun": (9_500 + 1000 * k) * MS, "nodes": later})
    polls.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    events: list[tuple[int, dict[str, Any]]] = []
    for i in range(1, 10):
        base = {"process": i, "f": "add", "value": i, "node": "n1"}
        acked_at = 9_700 if i == 9 else i * 1000
        events += [
            (acked_at - 10, {**base, "type": "invoke"}),
            (acked_at, {**base, "type": "ok", "lsn": 100 * i}),
        ]
    return _written(write_history, events), polls


def test_acknowledged_writes_no_safekeeper_holds_after_a_power_fault_are_lost(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    """As `--bug skip-fsync` under `power`: every safekeeper comes back with only the WAL it
    synced long ago."""
    history, polls = _powered_run(tmp_path, write_history, {"n3": 450, "n4": 450, "n5": 300})
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["anomaly_types"] == ["lost-acknowledged-write"]
    (lost,) = result["anomalies"]
    assert [op["value"] for op in lost["ops"]] == [5, 6, 7, 8]  # 9 came after the poll was sent
    assert lost["count"] == 4
    assert (
        "index" in lost["explanation"] and "(and 3 more acknowledged writes)" in lost["explanation"]
    )
    assert "no safekeeper holds its WAL" in lost["explanation"]


def test_acknowledged_writes_only_a_minority_holds_are_beyond_the_quorum(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    history, polls = _powered_run(tmp_path, write_history, {"n3": 1000, "n4": 650, "n5": 300})
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["anomaly_types"] == ["acknowledged-write-beyond-quorum"]
    (beyond,) = result["anomalies"]
    assert [op["value"] for op in beyond["ops"]] == [7, 8]  # n3 alone holds them
    assert "fewer than a quorum (2) hold it" in beyond["explanation"]


def test_writes_beyond_the_quorum_while_a_safekeeper_is_silent_are_lost_once_it_answers(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    """n5 does not answer the first poll after the power fault (it may hold everything), then
    answers with less: the writes first named beyond the quorum that no safekeeper holds are
    named lost, and those a minority still holds are not named again."""
    history, polls = _powered_run(
        tmp_path, write_history,
        {"n3": 650, "n4": 450, "n5": None},
        {"n3": 650, "n4": 450, "n5": 300},
        {"n3": 650, "n4": 450, "n5": 300},
    )  # fmt: skip
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    named = [(a["type"], [op["value"] for op in a["ops"]]) for a in result["anomalies"]]
    assert named == [
        ("acknowledged-write-beyond-quorum", [7, 8]),  # n5 silent: only n3 answered holding 5, 6
        ("acknowledged-write-beyond-quorum", [5, 6]),
        ("lost-acknowledged-write", [7, 8, 9]),
    ]


@pytest.mark.parametrize(
    "after",
    [
        pytest.param({"n3": 1000, "n4": 1000, "n5": 300}, id="a-minority-lost-its-wal"),
        pytest.param({"n3": 1000, "n4": None, "n5": 300}, id="one-holds-one-silent"),
    ],
)
def test_acknowledged_writes_a_quorum_may_hold_are_no_anomaly(
    tmp_path: Path, write_history: Any, ops_of: Any, after: dict[str, int | None]
) -> None:
    history, polls = _powered_run(tmp_path, write_history, after)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True, result["anomalies"]


def tarantool(writable: bool, vclock: dict[str, int]) -> dict[str, Any]:
    return {"writable": writable, "vclock": vclock}


def test_a_tarantool_vclock_that_goes_back_lost_what_it_had_written() -> None:
    rounds = [
        {
            "time": 1 * S,
            "nodes": {"n1": tarantool(True, {"1": 50}), "n2": tarantool(False, {"1": 48})},
        },
        {"time": 2 * S, "nodes": {"n1": tarantool(True, {"1": 60})}},  # n2 restarting
        {
            "time": 3 * S,
            "nodes": {"n1": tarantool(True, {"1": 70}), "n2": tarantool(False, {"1": 30})},
        },
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["vclock-backwards"]
    (anomaly,) = result["anomalies"]
    assert anomaly["window_ns"] == [1 * S, 3 * S]
    assert "n2's vclock went back" in anomaly["explanation"]
    assert "component 1 from 48 to 30" in anomaly["explanation"]


def test_vclocks_that_only_grow_and_a_local_component_are_no_anomaly() -> None:
    """Component 0 counts an instance's local changes, which are not replicated."""
    rounds = [
        {"time": 1 * S, "nodes": {"n2": tarantool(False, {"0": 9, "1": 48})}},
        {"time": 3 * S, "nodes": {"n2": tarantool(True, {"0": 2, "1": 48, "2": 5})}},
        {"time": 4 * S, "nodes": {"n2": tarantool(True, {"0": 3, "1": 48, "2": 9})}},
    ]
    assert analyse(rounds)["valid"] is True


def zk(generation: int, primary: str, sync: str, init_wal: int) -> dict[str, Any]:
    """The poll's entry for Manatee's cluster state in ZooKeeper."""
    state = {"generation": generation, "primary": primary, "sync": sync, "init_wal": init_wal}
    return {COORDINATION: {"cluster_state": state}}


def test_generations_declared_by_the_rules_of_seed_004_are_valid() -> None:
    """The sync takes over (G 2), then the new primary replaces its sync (G 3)."""
    rounds = [
        {"time": 1 * S, "nodes": zk(1, "n1", "n2", 100)},
        {"time": 2 * S, "nodes": zk(1, "n1", "n2", 100)},
        {"time": 5 * S, "nodes": zk(2, "n2", "n3", 900)},
        {"time": 9 * S, "nodes": zk(3, "n2", "n1", 900)},
        {"time": 30 * S, "nodes": zk(5, "n1", "n3", 2000)},  # G 4 passed unseen between polls
    ]
    result = analyse(rounds)
    assert result["valid"] is True, result["anomalies"]
    assert result["leaders"] == [
        {"start": 1.0, "end": None, "nodes": [], "term": None, "unit": "term"}
    ]  # the entry is no node of the lane


@pytest.mark.parametrize(
    ("after", "kind"),
    [
        pytest.param(zk(1, "n1", "n2", 100), "generation-backwards", id="backwards"),
        pytest.param(zk(2, "n2", "n1", 900), "generation-rewritten", id="rewritten"),
        pytest.param(zk(3, "n1", "n2", 950), "takeover-by-outsider", id="outsider"),
        pytest.param(zk(3, "n3", "n1", 800), "init-wal-backwards", id="init-wal"),
        pytest.param(zk(3, "n3", "n3", 950), "primary-is-sync", id="p-is-s"),
    ],
)
def test_a_cluster_state_against_seed_004_s_rules_is_named(after: dict, kind: str) -> None:
    rounds = [
        {"time": 1 * S, "nodes": zk(1, "n1", "n2", 100)},
        {"time": 5 * S, "nodes": zk(2, "n2", "n3", 900)},
        {"time": 7 * S, "nodes": after},
        {"time": 8 * S, "nodes": after},  # named once, not at every poll
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == [kind]
    (anomaly,) = result["anomalies"]
    assert anomaly["window_ns"] == [5 * S, 7 * S]
    assert anomaly["explanation"].startswith("ZooKeeper's cluster state at 7.0 s: ")


def voter(term: int, history: list[list[int]], voted_for: str) -> dict:
    return safekeeper(term, history, 0x1000000) | {"voted_for": voted_for}


def test_two_safekeepers_holding_one_terms_election_from_two_proposers_are_two_leaders() -> None:
    h = [[1, 0x1000000]]
    rounds = [
        {"time": 1 * S, "nodes": {"n3": voter(2, [*h, [2, 0x1000000]], "n1:7")}},
        {
            "time": 2 * S,
            "nodes": {
                "n3": voter(2, [*h, [2, 0x1000000]], "n1:7"),
                "n4": voter(2, [*h, [2, 0x1000000]], "n2:9"),
            },
        },
    ]
    result = analyse(rounds)
    assert result["anomaly_types"] == ["two-proposers-in-term"]
    assert result["anomalies"][0]["explanation"] == (
        "n3 followed n1:7 in term 2 (1.0 s) and n4 followed n2:9 in it (2.0 s), each holding the "
        "term's election: two proposers won one term"
    )
    epoch = [
        {"time": 1 * S, "nodes": {"n3": epoch_keeper(2, 2, 0x100, 0, 0x100) | {"voted_for": "a"}}},
        {"time": 2 * S, "nodes": {"n4": epoch_keeper(2, 2, 0x100, 0, 0x100) | {"voted_for": "b"}}},
    ]
    assert analyse(epoch)["anomaly_types"] == ["two-proposers-in-term"]


def test_a_split_vote_is_no_second_leader() -> None:
    """Two computes stood in term 2 at once: n4 voted for the loser, whose election never came,
    so n4 holds no entry for term 2; the winner's voters agree; term 3 is another term."""
    h = [[1, 0x1000000]]
    rounds = [
        {
            "time": 1 * S,
            "nodes": {
                "n3": voter(2, [*h, [2, 0x1000000]], "n1:7"),
                "n4": voter(2, h, "n2:9"),  # voted for the loser: no election from it
                "n5": voter(2, [*h, [2, 0x1000000]], "n1:7"),
            },
        },
        {"time": 2 * S, "nodes": {"n4": voter(3, [*h, [3, 0x1000000]], "n2:9")}},
        # an epoch-variant safekeeper announced an older epoch: its vote in term 4 is no leader's
        {
            "time": 3 * S,
            "nodes": {"n5": epoch_keeper(4, 3, h[0][1], 0, h[0][1]) | {"voted_for": "x"}},
        },
    ]
    assert analyse(rounds)["valid"] is True


def _donor_run(
    tmp_path: Path, write_history: Any, start: int, silent: bool = False
) -> tuple[Path, Path]:
    """Three safekeepers in term 1 while adds are acknowledged each second, the i-th with its
    WAL past 100·i. The poll sent at 4.98 s finds only n5 in term 2 (or, `silent`, hears from n3
    alone); by 6 s term 2 is won and starts at `start`. An add acknowledged at 5.5 s, in term 2,
    lies past it by right."""
    polls = tmp_path / "cluster.jsonl"
    one = safekeeper(1, [[1, 0]], 100, 1000)
    voted = safekeeper(2, [[1, 0]], 100, 1000)
    won = safekeeper(2, [[1, 0], [2, start]], 100, 1000)
    second = {"n3": one} if silent else {"n3": one, "n4": one, "n5": voted}
    rounds = [
        {"time": 2 * S, "begun": 1_980 * MS, "nodes": {"n3": one, "n4": one, "n5": one}},
        {"time": 5 * S, "begun": 4_980 * MS, "nodes": second},
        {"time": 6 * S, "begun": 5_980 * MS, "nodes": {"n3": won, "n4": won, "n5": won}},
    ]
    polls.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    events: list[tuple[int, dict[str, Any]]] = []
    for i, (acked_at, lsn) in enumerate([(1000, 100), (2000, 200), (3000, 300), (4000, 400),
                                         (5500, 900)], 1):  # fmt: skip
        base = {"process": i, "f": "add", "value": i, "node": "n1"}
        events += [(acked_at - 10, {**base, "type": "invoke"}),
                   (acked_at, {**base, "type": "ok", "lsn": lsn})]  # fmt: skip
    return _written(write_history, events), polls


def test_writes_acknowledged_before_a_term_was_won_past_its_start_are_named(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    """As `--bug recover-lowest`: term 2's donor was the voter with the least WAL."""
    history, polls = _donor_run(tmp_path, write_history, start=250)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["anomaly_types"] == ["term-lacks-acknowledged-write"], result["anomalies"]
    (lacks,) = result["anomalies"]
    assert [op["value"] for op in lacks["ops"]] == [3, 4] and lacks["term"] == 2
    assert "came before term 2 was won" in lacks["explanation"]
    assert "n3 term 1, n4 term 1, n5 term 2" in lacks["explanation"]


def test_a_term_that_starts_past_every_earlier_acknowledged_write_is_valid(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    history, polls = _donor_run(tmp_path, write_history, start=450)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True, result["anomalies"]


def test_a_poll_too_few_answered_proves_no_term_unwon(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    """n4 and n5 silent at 4.98 s may have voted in term 2 already: only the poll sent at
    1.98 s proves it unwon, and the add acknowledged before it lies below the start."""
    history, polls = _donor_run(tmp_path, write_history, start=150, silent=True)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True, result["anomalies"]


def _recovery_run(
    tmp_path: Path, write_history: Any, at: dict[int, dict[str, dict]], until: int
) -> tuple[Path, Path]:
    """Polls each second up to `until` s of two computes and three safekeepers, whole but for
    what `at[t]` says from second t on; a kill from 10 s to 20 s; one acknowledged add."""
    polls, rounds = tmp_path / "cluster.jsonl", []
    nodes = {
        "c1": compute(True, 2),
        "c2": compute(False, None, "standby"),
        **{f"s{i}": safekeeper(2, [[1, 0], [2, 100]], 500) for i in (1, 2, 3)},
    }
    for t in range(1, until + 1):
        nodes = {n: s for n, s in (nodes | at.get(t, {})).items() if s}
        rounds.append({"time": t * S, "begun": t * S - 5 * MS, "nodes": nodes})
    polls.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    events: list[tuple[int, dict[str, Any]]] = []
    for f, ms in (("start-kill", 10_000), ("stop-kill", 20_000)):
        base = {"process": "nemesis", "f": f, "value": {"fault": "kill", "target": "one"}}
        events += [(ms, {**base, "type": "invoke"}), (ms + 100, {**base, "type": "info"})]
    add = {"process": 0, "f": "add", "value": 1, "node": "c1"}
    events += [(1, {**add, "type": "invoke"}), (5, {**add, "type": "ok"})]
    return _written(write_history, events), polls


BEHIND = {"s3": {**safekeeper(2, [[1, 0]], 100), "flush_lsn": 100}}


@pytest.mark.parametrize(
    ("at", "named"),
    [
        ({15: BEHIND}, "s3: its WAL ends at 0/64, below the commit position 0/1F4"),
        ({15: {"c2": compute(False, None, "rebuilding")}}, "c2: its agent is rebuilding"),
        (
            {15: {"c2": compute(False, None, "standby") | {"consistent": False}}},
            "c2: it is a standby whose Postgres does not answer queries",
        ),
        ({15: {"s2": {}}}, "s2: it does not answer"),
        (
            {15: {"c1": compute(True, 2) | {"limbo": 3, "taking_writes": False}}},
            "c1: it serves but still holds an earlier leader's transactions",
        ),
        ({15: {"c1": compute(False, None, "candidate")}}, "no member serves clients"),
    ],
)
def test_a_member_left_behind_long_after_the_last_heal_is_not_recovered(
    tmp_path: Path, write_history: Any, ops_of: Any, at: dict, named: str
) -> None:
    history, polls = _recovery_run(tmp_path, write_history, at, until=115)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["anomaly_types"] == ["not-recovered"]
    (anomaly,) = result["anomalies"]
    assert named in anomaly["missing"] and named in anomaly["explanation"]
    assert "the last fault healed at 20.1 s" in anomaly["explanation"]


def test_a_member_back_within_the_limit_or_a_run_too_short_to_tell_is_no_anomaly(
    tmp_path: Path, write_history: Any, ops_of: Any
) -> None:
    whole = {
        "s3": safekeeper(2, [[1, 0], [2, 100]], 500),
        "c2": compute(False, None, "standby") | {"consistent": True},
    }
    replaying = {"c2": compute(False, None, "standby") | {"consistent": False}}
    # c2 led a term and lost it with prepared transactions waiting; back as a consistent
    # standby, its agent still described that limbo (confirm-rollback, partition-seed001 seed 1)
    led_once = {"limbo": 4, "taking_writes": False, "consistent": True}
    history, polls = _recovery_run(
        tmp_path, write_history, {15: BEHIND | replaying, 95: whole}, until=115
    )
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True, result["anomalies"]
    stale = {"c2": compute(False, None, "standby") | led_once}
    history, polls = _recovery_run(tmp_path, write_history, {15: BEHIND, 95: whole | stale}, 115)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True, result["anomalies"]
    assert result["recovered_s"] == pytest.approx(95 - 20.1, abs=0.1)
    # Interrupted 60 s after the heal with s3 still behind: not yet a verdict.
    history, polls = _recovery_run(tmp_path, write_history, {15: BEHIND}, until=80)
    result = both_ways(plain_check, fed_check, ops_of(history), history, polls=str(polls))
    assert result["valid"] is True and "recovered_s" not in result
