"""The seeds' histories replayed against real safekeepers: seed 001's S1/S2/S3 examples (both
variants get them right) and seed 003's five-safekeeper history (only term-history does)."""

from __future__ import annotations

import pytest

from systems.walkeeper.proposer import PAGE
from tests.protocol.conftest import RECORD, Writer, broken_links, lsn


def seed001_start(make_safekeepers, variant: str):
    """S1: R1; S2: R1 R2; S3: R1..R4, written by a first proposer, which then goes away."""
    sks = make_safekeepers(variant, 3)
    p1 = Writer(sks, "P1").elect("A", "B", "C")
    p1.write(1, "A", "B", "C")
    p1.heartbeat("A", "B", "C")  # everyone learns R1 is held by all (restartLSN)
    p1.write(1, "B", "C")
    p1.write(2, "C")
    assert [sks.log(n) for n in "ABC"] == [["1.1"], ["1.1", "1.2"], ["1.1", "1.2", "1.3", "1.4"]]
    return sks


def test_seed001_recovery_overwrites_uncommitted_tail(make_safekeepers, variant: str) -> None:
    """Quorum (S1, S2) elects with VCL = R2; R3(e) commits on S1, S2; a later election that
    includes S3 keeps R3(e) and overwrites S3's uncommitted R3(c), R4(d)."""
    sks = seed001_start(make_safekeepers, variant)
    sks.stop("C")
    p2 = Writer(sks, "P2").elect("A", "B")
    assert p2.p.vcl == lsn(3) and p2.p.donor == "B"
    p2.write(1, "A", "B")
    assert p2.p.commit_lsn == lsn(4)
    sks.start("C")
    sks.stop("A")
    p3 = Writer(sks, "P3").elect("B", "C")
    assert p3.p.vcl == lsn(4), "the committed R3 of term 2 must win over S3's longer old log"
    p3.write(1, "B", "C")
    assert sks.log("B") == sks.log("C") == ["1.1", "1.2", "2.3", "3.4"]
    assert broken_links(sks.wal("C")) == []


def test_seed001_crash_during_recovery(make_safekeepers, variant: str) -> None:
    """The proposer crashes after copying R2 to S1 and before any new record: a later election
    that sees S3 takes S3's R3(c), R4(d) as the log (nothing newer was ever written)."""
    sks = seed001_start(make_safekeepers, variant)
    sks.stop("C")
    p2 = Writer(sks, "P2").elect("A", "B")
    p2.send("A")
    assert sks.log("A") == ["1.1", "1.2"]
    sks.start("C")
    p3 = Writer(sks, "P3").elect("A", "C")
    assert p3.p.vcl == lsn(5) and p3.p.donor == "C"
    for name in "ABC":
        p3.send(name)
    assert sks.log("A") == sks.log("B") == sks.log("C") == ["1.1", "1.2", "1.3", "1.4"]


def seed003(make_safekeepers, variant: str):
    """Seed 003 up to the point where P3 has moved one record, 2.2, to A; then P4 is elected by
    A, B and E and commits a record. Returns the safekeepers."""
    sks = make_safekeepers(variant, 5)
    p1 = Writer(sks, "P1").elect(*"ABCDE")
    p1.write(1, *"ABCDE")
    p1.heartbeat(*"ABCDE")
    p1.write(3, "A")
    sks.stop("A")
    p2 = Writer(sks, "P2").elect("C", "D", "E")
    assert p2.p.vcl == lsn(2)
    p2.write(2, "C", "D")
    p3 = Writer(sks, "P3").elect("C", "D", "E")
    assert p3.p.vcl == lsn(4)
    p3.write(1, "D")
    sks.start("A")
    p3.send("A", records=1)  # "P3 moves one record 2.2 to A", then P3 is gone
    for name in "CD":
        sks.stop(name)
    p4 = Writer(sks, "P4").elect("A", "B", "E")
    p4.write(1, "A", "B", "E")
    assert p4.p.commit_lsn == p4.p.log_end, "P4's record is committed on A, B and E"
    return sks


def test_seed003_epoch_commits_a_corrupted_log(make_safekeepers) -> None:
    sks = seed003(make_safekeepers, "epoch")
    assert sks.log("A")[:4] == ["1.1", "2.2", "1.3", "1.4"]
    for name in "ABE":
        assert "1.3 follows 2.2" in broken_links(sks.wal(name)), sks.log(name)


def test_seed003_term_history_truncates_at_the_divergence_point(make_safekeepers) -> None:
    sks = seed003(make_safekeepers, "term-history")
    for name in "ABE":
        assert sks.log(name) == ["1.1", "2.2", "4.3"]
        assert broken_links(sks.wal(name)) == []
    assert sks.status("A")["history"] == [[1, lsn(1)], [2, lsn(2)], [4, lsn(3)]]


def split_term(make_safekeepers, variant: str):
    """The history `nemesis/seed003.py` places on the real cluster (seed 003 with its P2 and P3
    in one term): P1's tail 1.2, 1.3 reaches only A; P2 is elected by B, C, D and E, and its
    record 2.2 reaches C and D, then A (which did not vote), but not B or E; P3 is elected by A,
    B and E and commits its log; P4 is elected by all five. Returns P3's and P4's proposers and
    the safekeepers."""
    sks = make_safekeepers(variant, 5)
    p1 = Writer(sks, "P1").elect(*"ABCDE")
    p1.write(1, *"ABCDE")
    p1.heartbeat(*"ABCDE")
    p1.write(2, "A")
    sks.stop("A")
    p2 = Writer(sks, "P2").elect(*"BCDE")
    p2.write(1, "C", "D")
    sks.start("A")
    p2.send("A")
    for name in "CD":
        sks.stop(name)
    p3 = Writer(sks, "P3").elect(*"ABE")
    for name in "ABE":
        p3.send(name)
    p3.heartbeat(*"ABE")  # A, which P3 sent nothing, acknowledges its log
    p3.heartbeat(*"ABE")  # and the commit LSN reaches every one of them
    for name in "CD":
        sks.start(name)
    p4 = Writer(sks, "P4").elect(*"ABCDE")
    return p3.p, p4.p, sks


def test_split_term_epoch_commits_a_log_no_proposer_wrote_then_drops_it(make_safekeepers) -> None:
    p3, p4, sks = split_term(make_safekeepers, "epoch")
    assert p3.donor == "A" and p3.commit_lsn == lsn(4)
    for name in "ABE":
        assert sks.log(name) == ["1.1", "2.2", "1.3"]
        assert broken_links(sks.wal(name)) == ["1.3 follows 2.2"]
        assert sks.status(name)["commit_lsn"] == lsn(4)
    # C's epoch is higher: the next term's log starts below what A, B and E reported committed
    assert p4.donor in ("C", "D") and p4.vcl == lsn(3) < p3.commit_lsn


def test_split_term_term_history_truncates_a_when_it_joins(make_safekeepers) -> None:
    p3, p4, sks = split_term(make_safekeepers, "term-history")
    assert p3.donor == "A" and p3.vcl == lsn(3)
    for name in "ABE":
        assert sks.log(name) == ["1.1", "2.2"] and broken_links(sks.wal(name)) == []
    assert p4.vcl >= p3.commit_lsn


@pytest.mark.parametrize("variant", ["term-history", "epoch"])
def test_an_old_proposer_is_fenced(make_safekeepers, variant: str) -> None:
    """Seed 000: once a quorum promised a higher term, the old proposer's appends are refused,
    so it can no longer advance its commit LSN."""
    from systems.walkeeper.proposer import Deposed

    sks = make_safekeepers(variant, 3)
    p1 = Writer(sks, "P1").elect("A", "B", "C")
    p1.write(1, "A", "B", "C")
    Writer(sks, "P2").elect("A", "B")
    with pytest.raises(Deposed):
        p1.write(1, "A")
    p1.write(0, "C")  # C never voted again: it still takes P1's WAL, but one is no quorum
    assert p1.p.commit_lsn == lsn(2)


def test_a_vote_survives_a_restart(make_safekeepers) -> None:
    sks = make_safekeepers("term-history", 3)
    Writer(sks, "P1").elect("A", "B", "C")
    sks.stop("A")
    sks.start("A")
    assert sks.status("A")["term"] == 1
    assert sks.status("A")["voted_for"] == "P1"


def test_committed_wal_is_never_truncated(make_safekeepers) -> None:
    """A safekeeper refuses an announcement that would cut below the commit LSN it knows."""
    from systems.walkeeper import wire

    sks = make_safekeepers("term-history", 3)
    p1 = Writer(sks, "P1").elect("A", "B", "C")
    p1.write(2, "A", "B", "C")
    p1.heartbeat("A")  # A learns the commit LSN
    with wire.connect(sks.addresses["A"], 2) as sock:
        assert wire.call(sock, {"type": "vote", "term": 5, "proposer": "rogue"})[0]["ok"]
        reply, _ = wire.call(
            sock,
            {
                "type": "elected",
                "term": 5,
                "proposer": "rogue",
                "history": [[5, lsn(1)]],
                "truncate_lsn": lsn(1),
            },
        )
    assert not reply["ok"] and "committed" in reply["error"]
    assert sks.log("A") == ["1.1", "1.2"]


def test_appends_end_where_a_message_of_postgres_ends(make_safekeepers) -> None:
    """A safekeeper's log never ends inside one of Postgres's messages: one whose flush position
    ended inside a page's record could become the donor, and Postgres's crash recovery would not
    continue that log unchanged."""
    sks = make_safekeepers("term-history", 3)
    w = Writer(sks, "P1").elect("A", "B", "C")
    w.write(3)  # three messages of one record each, sent to nobody yet
    w.p.attach("A")
    assert w.p.step("A", limit=2 * RECORD.size + 8) == 2 * RECORD.size  # two whole messages
    assert w.p.step("A", limit=8) == RECORD.size  # a message longer than the limit goes whole
    assert sks.status("A")["flush_lsn"] == lsn(4)


def test_an_append_inside_a_long_message_ends_at_a_page_boundary(make_safekeepers) -> None:
    """Postgres's walsender itself ends a message at a page boundary inside a record, and its
    crash recovery continues a log that ends there (an overwrite-contrecord at the boundary). So
    a slow link's small appends cut a long message at a page boundary, not inside a page."""
    sks = make_safekeepers("term-history", 3)
    w = Writer(sks, "P1").elect("A", "B", "C")
    records = 3 * PAGE // RECORD.size
    w.p.write(b"".join(RECORD.pack(w.p.term, i, 0, 0) for i in range(1, records + 1)))
    w.p.attach("A")
    # one message of three pages: cut at the last page boundary within the limit
    assert w.p.step("A", limit=2 * PAGE + 100) == 2 * PAGE
    assert w.p.step("A", limit=PAGE // 2) == PAGE  # no boundary within the limit: the next one
    assert sks.status("A")["flush_lsn"] == lsn(1) + 3 * PAGE


def test_a_new_term_is_heard_from_its_announcement_on(make_safekeepers) -> None:
    """A standby takes over once a quorum of safekeepers has heard from no proposer for 5 s. The
    winner of a term is heard from its announcement on, so a third compute does not stand
    against it while it brings its Postgres to the log (the users' 600 s run: two computes won
    adjacent terms within a second). A vote alone does not count: its proposer may never win."""
    import time

    sks = make_safekeepers("term-history", 3)
    p1 = Writer(sks, "P1").elect("A", "B", "C")
    p1.write(1, "A", "B", "C")
    time.sleep(0.5)
    p2 = Writer(sks, "P2").elect("A", "B")
    assert sks.status("A")["heard_ago"] >= 0.5  # voted, not yet announced
    p2.p.attach("A")
    assert sks.status("A")["heard_ago"] < 0.4
    assert sks.status("B")["heard_ago"] >= 0.5


def test_a_takeover_needs_voters_silent_when_they_vote(make_safekeepers) -> None:
    """The users' 600 s run at seed 0: a standby judged the primary lost from statuses read
    before another compute won a term, and won the next term 0.76 s after it, so two computes
    served at once. A takeover's votes now come only from safekeepers still silent when they
    vote: the fresh winner keeps its term, and a takeover succeeds once the quorum is silent."""
    import time

    from systems.walkeeper import wire
    from systems.walkeeper.proposer import NoQuorum

    sks = make_safekeepers("term-history", 3)
    p1 = Writer(sks, "P1").elect("A", "B", "C")
    p1.write(1, "A", "B", "C")
    quiet = 1.5  # wide enough that a loaded machine does not let P2 fall silent mid-test
    time.sleep(quiet + 0.1)  # P1 fell silent: the statuses a standby reads now say it is lost
    stale = [sks.status(n) for n in "ABC"]
    p2 = Writer(sks, "P2").elect("A", "B", "C")
    p2.write(1, "A", "B", "C")  # P2 won term 2 after those statuses were read
    with pytest.raises(NoQuorum, match="heard from a proposer"):
        Writer(sks, "P3").p.elect(["A", "B", "C"], quiet=quiet)
    # even a vote sent on the stale statuses alone is refused, atomically, by each safekeeper
    assert all(s["heard_ago"] > quiet for s in stale)
    with wire.connect(sks.addresses["A"], 2) as sock:
        vote = {"type": "vote", "term": 3, "proposer": "P3", "quiet": quiet}
        reply = wire.call(sock, vote)[0]
    assert not reply["ok"] and "takeover" in reply["error"]
    assert [sks.status(n)["term"] for n in "ABC"] == [2, 2, 2]
    p2.write(1, "A", "B", "C")  # P2 still leads: nothing deposed it
    assert sks.log("A") == ["1.1", "2.2", "2.3"]
    time.sleep(quiet + 0.1)  # now P2 is silent too: the takeover wins
    p3 = Writer(sks, "P3")
    p3.p.elect(["A", "B", "C"], quiet=quiet)
    assert p3.p.term == 3


def test_a_compute_stands_for_its_own_term_only_while_nobody_else_won_one(make_safekeepers) -> None:
    """A compute whose earlier session the safekeepers followed stands at once, without waiting
    for silence; if another compute won a term since its statuses were read, it stands down."""
    from systems.walkeeper.proposer import NoQuorum

    sks = make_safekeepers("term-history", 3)
    Writer(sks, "n1-1").elect("A", "B", "C").write(1, "A", "B", "C")
    Writer(sks, "n2-1").elect("A", "B")  # a takeover while n1's statuses were being read
    with pytest.raises(NoQuorum, match="now follow n2-1 in term 2"):
        Writer(sks, "n1-2").p.elect(["A", "B", "C"], own=lambda p: p.startswith("n1-"))
    assert sks.status("A")["term"] == 2
    Writer(sks, "n2-2").p.elect(["A", "B", "C"], own=lambda p: p.startswith("n2-"))
    assert sks.status("A")["term"] == 3
