"""The leader's limbo decisions (systems/walkeeper/limbo.decide), as pure logic: what the
quorum holds is confirmed in WAL order; this leader's own transactions are rolled back together
once the oldest waited too long; an earlier leader's are only ever confirmed."""

from __future__ import annotations

from systems.walkeeper.limbo import Waiting, decide

TIMEOUT = 2.0


def waiting(**entries: tuple[int, float, bool]) -> dict[str, Waiting]:
    return {
        gid: Waiting("harness", bound, since, inherited)
        for gid, (bound, since, inherited) in entries.items()
    }


def test_confirms_what_the_quorum_holds_in_wal_order() -> None:
    w = waiting(b=(200, 0.0, False), a=(100, 0.0, False), c=(300, 0.0, False))
    assert decide(w, 250, now=0.5, timeout=TIMEOUT) == (["a", "b"], [])


def test_nothing_is_confirmed_before_the_quorum_is_known() -> None:
    w = waiting(a=(100, 0.0, False))
    assert decide(w, None, now=0.5, timeout=TIMEOUT) == ([], [])


def test_rolls_back_every_own_waiting_transaction_once_the_oldest_is_late() -> None:
    w = waiting(a=(100, 0.0, False), b=(200, 1.9, False), c=(50, 0.0, False))
    confirm, roll_back = decide(w, 60, now=2.1, timeout=TIMEOUT)
    assert confirm == ["c"] and roll_back == ["a", "b"]


def test_waits_until_the_oldest_is_late() -> None:
    w = waiting(a=(100, 0.5, False), b=(200, 0.0 + 1.0, False))
    assert decide(w, 60, now=2.4, timeout=TIMEOUT) == ([], [])


def test_an_earlier_leaders_transaction_is_never_rolled_back() -> None:
    w = waiting(old=(100, 0.0, True))
    assert decide(w, 60, now=100.0, timeout=TIMEOUT) == ([], [])
    assert decide(w, 100, now=100.0, timeout=TIMEOUT) == (["old"], [])


def test_own_transactions_behind_an_inherited_one_still_time_out() -> None:
    w = waiting(old=(100, 0.0, True), new=(200, 0.0, False))
    assert decide(w, 60, now=3.0, timeout=TIMEOUT) == ([], ["new"])
