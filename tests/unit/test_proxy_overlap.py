"""Where the safekeepers' log meets Postgres's stream: equal bytes pass, different bytes stop."""

from __future__ import annotations

import pytest

from systems.walkeeper.pgstream import StreamError
from systems.walkeeper.proxy import Overlap

WAL = bytes(range(256)) * 4  # Postgres's WAL from LSN 1000


def test_only_what_follows_vcl_continues_the_log() -> None:
    overlap = Overlap(1000, 1100, WAL[:100])
    assert overlap.take(1000, WAL[:60]) == (1100, b"")
    assert overlap.take(1060, WAL[60:150]) == (1100, WAL[100:150])
    assert overlap.take(1150, WAL[150:200]) == (1150, WAL[150:200])


def test_a_different_byte_before_vcl_stops_the_proxy() -> None:
    theirs = bytearray(WAL[:100])
    theirs[42] ^= 0xFF
    overlap = Overlap(1000, 1100, bytes(theirs))
    with pytest.raises(StreamError, match="differs from the safekeepers' at 0/412"):
        overlap.take(1000, WAL[:200])


def test_bytes_the_safekeepers_could_not_give_are_not_compared() -> None:
    """The donor gave 50 of the 100 bytes before VCL: the rest is skipped, not trusted."""
    overlap = Overlap(1000, 1100, WAL[:50])
    assert overlap.take(1000, WAL[:120]) == (1100, WAL[100:120])
