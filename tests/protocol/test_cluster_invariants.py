"""The cluster-state checker on real safekeepers: each invariant broken the way a broken
safekeeper would leave it (its control file rewritten in place while it is down), then polled
as a run polls the cluster (each safekeeper's status, the keys the kind keeps), and named; and a
correct sequence of terms, polled the same way, in which every one holds."""

from __future__ import annotations

import json
from typing import Any

from checkers.cluster_state import analyse
from clusters.kinds.safekeeper import ask_status, keeper_poll
from core.polls import Round
from tests.protocol.conftest import Writer, lsn

S = 1_000_000_000


class Polls:
    """Rounds of the safekeepers' statuses, a second apart, as harness/polls.py records them."""

    def __init__(self, sks: Any) -> None:
        self.sks, self.rounds = sks, []

    def poll(self) -> None:
        nodes = {}
        for name, address in self.sks.addresses.items():
            state = ask_status(address, 2.0)
            if state.get("ok"):
                nodes[name] = keeper_poll(state)
        self.rounds.append(Round(time=(len(self.rounds) + 1) * S, nodes=nodes))

    def found(self) -> list[str]:
        return analyse(self.rounds)["anomaly_types"]


def rewrite_control(sks: Any, name: str, **changes: Any) -> None:
    """Stop the safekeeper, change its control file as given, start it again."""
    sks.stop(name)
    path = sks.root / name / "control.json"
    control = json.loads(path.read_text())
    path.write_text(json.dumps(control | changes))
    sks.start(name)


def test_terms_won_and_written_in_turn_keep_every_invariant(make_safekeepers) -> None:
    sks = make_safekeepers("term-history", 3)
    polls = Polls(sks)
    w1 = Writer(sks, "P1").elect("A", "B", "C")
    w1.write(8, "A", "B", "C")
    w1.heartbeat("A", "B", "C")
    polls.poll()
    w2 = Writer(sks, "P2").elect("B", "C")
    w2.write(4, "B", "C")
    w2.heartbeat("B", "C")
    polls.poll()
    w3 = Writer(sks, "P3").elect("A", "B", "C")
    w3.write(2, "A", "B", "C")
    w3.heartbeat("A", "B", "C")
    polls.poll()
    polls.poll()
    assert polls.found() == []
    assert analyse(polls.rounds)["max_term"] == 3


def test_a_second_start_for_a_term_is_two_leaders_in_term(make_safekeepers) -> None:
    sks = make_safekeepers("term-history", 3)
    polls = Polls(sks)
    Writer(sks, "P1").elect("A", "B", "C").write(8, "A", "B", "C")
    polls.poll()
    rewrite_control(sks, "B", history=[[1, lsn(2)]])  # B: term 1 began elsewhere
    polls.poll()
    assert polls.found() == ["two-leaders-in-term"]


def test_a_vote_forgotten_is_a_term_going_backwards(make_safekeepers) -> None:
    sks = make_safekeepers("term-history", 3)
    polls = Polls(sks)
    first = Writer(sks, "P1").elect("A", "B", "C")
    first.write(4, "A", "B", "C")
    Writer(sks, "P2").elect("A", "B")
    polls.poll()
    # A's vote in term 2 never reached its disk: its control file holds its vote in term 1
    rewrite_control(sks, "A", term=1, voted_for=first.p.id)
    polls.poll()
    assert polls.found() == ["term-backwards"]


def test_a_commit_only_one_safekeeper_holds_is_beyond_the_quorum(make_safekeepers) -> None:
    sks = make_safekeepers("term-history", 3)
    polls = Polls(sks)
    Writer(sks, "P1").elect("A", "B", "C").write(8, "A")  # only A holds the records
    polls.poll()
    rewrite_control(sks, "A", commit_lsn=lsn(9))  # and calls them committed
    polls.poll()
    polls.poll()
    assert polls.found() == ["commit-beyond-quorum"]


def test_a_term_that_starts_below_committed_wal_is_found(make_safekeepers) -> None:
    sks = make_safekeepers("term-history", 3)
    polls = Polls(sks)
    w = Writer(sks, "P1").elect("A", "B", "C")
    w.write(8, "A", "B", "C")
    w.heartbeat("A", "B", "C")
    polls.poll()
    assert max(r.commit_lsn for r in polls.rounds[-1].nodes.values()) == lsn(9)
    # B took term 2 from a voter with less WAL: its log restarts at record 5
    rewrite_control(sks, "B", term=2, history=[[1, lsn(1)], [2, lsn(5)]])
    polls.poll()
    assert polls.found() == ["term-below-commit"]
