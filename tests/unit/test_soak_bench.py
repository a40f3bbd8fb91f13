"""bench/soak.py's slow catch-ups: from a compute's log, the seconds from each term won to its
WAL checked against the log, leaving out elections the compute did not live to follow up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from soak import catch_ups

LOG = """\
2026-11-28 19:42:17,793 compute INFO compute agent n1: safekeepers ['n3', 'n4', 'n5']
2026-11-28 19:42:17,837 proposer INFO elected in term 1 by ['n3', 'n4', 'n5']; donor n3, VCL 0/0
2026-11-28 19:42:42,054 proposer INFO elected in term 3 by ['n3', 'n4', 'n5']; donor n3
2026-11-28 19:42:42,067 proxy INFO n5 attached at 0/5004420
2026-11-28 19:42:42,407 compute INFO Postgres's WAL (to 0/5004420) holds the log to VCL 0/5004420
2026-11-28 19:42:51,150 proposer INFO elected in term 4 by ['n3', 'n4', 'n5']; donor n3
2026-11-28 19:42:59,876 compute INFO compute agent n1: safekeepers ['n3', 'n4', 'n5']
2026-11-28 19:43:17,225 proposer INFO elected in term 7 by ['n3', 'n4', 'n5']; donor n3
pg_ctl: another server might be running; trying to start server anyway
2026-11-28 19:43:22,292 compute INFO wrote WAL 0/5004420..0/600DB78 into pg_wal
"""


def test_each_catch_up_is_timed_from_its_election_and_a_restart_drops_the_unfinished() -> None:
    assert catch_ups(LOG) == pytest.approx([0.353, 5.067])
