"""`harness cluster status` keeps a long term history to a short cell: its count and last
entries; short values are shown whole."""

from __future__ import annotations

from harness.cli import status_cell


def test_a_long_term_history_shows_its_count_and_last_entries() -> None:
    history = [[t, f"0/{t:X}000"] for t in range(1, 14)]
    assert status_cell(history) == "13: … [11, '0/B000'], [12, '0/C000'], [13, '0/D000']"


def test_short_values_are_shown_whole() -> None:
    assert status_cell([[1, "0/1000"], [2, "0/2000"]]) == "[[1, '0/1000'], [2, '0/2000']]"
    assert status_cell("leader") == "leader" and status_cell(7) == "7"
