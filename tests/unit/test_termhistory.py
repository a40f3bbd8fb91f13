"""The pure rules both daemons share: where two logs diverge, and the position a quorum holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from systems.walkeeper.termhistory import divergence, last_term, quorum_position, upto


def test_upto_drops_terms_that_hold_no_record() -> None:
    history = [[1, 100], [2, 200], [3, 300]]
    assert upto(history, 300) == [[1, 100], [2, 200]]
    assert last_term(history, 300) == 2
    assert last_term(history, 301) == 3
    assert last_term([], 0) == 0


def test_divergence_in_seed_003() -> None:
    """A holds 1.1–1.4 of term 1; P3's log is 1.1, then term 2 from 2, then term 3 from 4: they
    agree only up to where term 1 ends in P3's log."""
    a = [[1, 1]]
    p3 = [[1, 1], [2, 2], [3, 4]]
    assert divergence(a, 5, p3, 5) == 2
    # D holds P2's 2.2 2.3: it agrees with P3 up to 4, where P3's own term begins
    assert divergence([[1, 1], [2, 2]], 4, p3, 5) == 4
    # a safekeeper that holds nothing agrees on nothing before our first record
    assert divergence([], 0, p3, 5) == 1


def test_divergence_when_the_safekeeper_is_behind() -> None:
    """A log that is a strict prefix of ours diverges nowhere: it continues from its end."""
    assert divergence([[1, 1], [2, 2]], 3, [[1, 1], [2, 2], [4, 3]], 9) == 3


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Two logs of records labelled (term, index) that share a prefix and then each continue
    with records of their own, later terms: what two proposers in turn would leave."""
    common = draw(st.lists(st.integers(1, 3), max_size=6).map(sorted))
    mine = draw(st.lists(st.integers(4, 6), max_size=5).map(sorted))
    theirs = draw(st.lists(st.integers(7, 9), max_size=5).map(sorted))
    ours = [(t, i) for i, t in enumerate(common + mine)]
    their = [(t, i) for i, t in enumerate(common + theirs)]
    return ours, their


def history_of(log: list[tuple[int, int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for term, lsn in log:
        if not out or out[-1][0] != term:
            out.append([term, lsn])
    return out


@given(logs())
def test_divergence_is_the_longest_common_prefix(pair: tuple[list, list]) -> None:
    ours, theirs = pair
    common = 0
    while common < min(len(ours), len(theirs)) and ours[common] == theirs[common]:
        common += 1
    if not theirs or not ours:
        return
    got = divergence(history_of(theirs), len(theirs), history_of(ours), len(ours))
    assert got == common


@given(st.lists(st.integers(0, 1000), max_size=7), st.integers(0, 3))
def test_quorum_position_is_held_by_a_majority(positions: list[int], silent: int) -> None:
    """The highest position at least a majority of all acceptors (silent ones hold nothing)
    has reached, by brute force."""
    total = max(1, len(positions) + silent)
    got = quorum_position(positions, total)
    quorum = total // 2 + 1
    assert sum(1 for p in positions if p >= got) >= quorum or got == 0
    assert not any(sum(1 for p in positions if p >= c) >= quorum for c in range(got + 1, 1001))
