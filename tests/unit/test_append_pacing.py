"""How the proxy sizes its appends to a safekeeper: small enough on a slow link that each ends
well inside the timeout, back to the largest on a fast one."""

from __future__ import annotations

from systems.walkeeper.proposer import FIRST_APPEND, MAX_APPEND, PAGE, paced

TIMEOUT = 3.0


def test_a_slow_append_halves_the_next_ones_down_to_a_page() -> None:
    limit = MAX_APPEND
    for _ in range(20):
        limit = paced(limit, limit, 1.5, TIMEOUT)
    assert limit == PAGE


def test_a_timed_out_append_halves_the_next_ones() -> None:
    assert paced(MAX_APPEND, MAX_APPEND, TIMEOUT, TIMEOUT) == MAX_APPEND // 2


def test_fast_full_appends_double_back_to_the_largest() -> None:
    limit = PAGE
    for _ in range(20):
        limit = paced(limit, limit, 0.01, TIMEOUT)
    assert limit == MAX_APPEND


def test_a_fast_append_of_little_wal_says_nothing_of_the_link() -> None:
    """A heartbeat, or the few bytes of one commit, ends fast on any link: no growth from it."""
    assert paced(PAGE * 2, 100, 0.01, TIMEOUT) == PAGE * 2


def test_an_append_that_ends_in_time_keeps_the_size() -> None:
    assert paced(PAGE * 4, PAGE * 4, 0.5, TIMEOUT) == PAGE * 4


def test_a_burst_starts_small_whatever_the_last_one_reached() -> None:
    """The link may have slowed since: the first append of a burst ends in time on a starved
    connection too, and a fast link doubles it back within two round trips."""
    assert paced(MAX_APPEND, MAX_APPEND, 0.01, TIMEOUT, caught_up=True) == FIRST_APPEND
    assert paced(FIRST_APPEND, 100, 0.01, TIMEOUT, caught_up=True) == FIRST_APPEND


def test_a_slow_link_keeps_its_small_appends_across_bursts() -> None:
    assert paced(PAGE, PAGE, 0.5, TIMEOUT, caught_up=True) == PAGE
