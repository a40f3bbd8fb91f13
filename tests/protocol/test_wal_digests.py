"""Checksums of LSN ranges, asked of real safekeepers: the same log gives the same digests, and
one safekeeper's WAL altered in place is named as a divergence of the committed log, with the
range and the sides."""

from __future__ import annotations

from typing import Any

from checkers.cluster_state import divergence
from clusters.kinds.safekeeper import ask
from tests.protocol.conftest import RECORD, Writer, lsn

SPAN = 4 * RECORD.size  # four records per compared range


def collected(sks: Any, names: str, start: int, end: int) -> dict[str, Any]:
    digests: dict[str, list[list[Any]]] = {}
    for name in names:
        chunks = digests.setdefault(name, [])
        for lo in range(start, end, SPAN):
            request = {"type": "checksum", "start": lo, "end": min(lo + SPAN, end)}
            reply = ask(sks.addresses[name], request, 5.0)
            assert reply["ok"], reply
            chunks.append([lo, reply["end"], reply["sha256"]])
    return {"commit_lsn": end, "digests": digests}


def test_the_same_log_has_the_same_digests_and_an_altered_byte_is_found(
    make_safekeepers,
) -> None:
    sks = make_safekeepers("term-history", 3)
    w = Writer(sks, "P1").elect("A", "B", "C")
    w.write(12, "A", "B", "C")
    end = lsn(13)
    assert divergence(collected(sks, "ABC", lsn(1), end)) == []
    wal = sks.root / "C" / "wal"
    data = bytearray(wal.read_bytes())
    data[5 * RECORD.size + 3] ^= 0xFF  # record 6, in the second range
    wal.write_bytes(bytes(data))
    (found,) = divergence(collected(sks, "ABC", lsn(1), end))
    assert found["type"] == "log-divergence"
    assert found["lsn_range"] == [lsn(5), lsn(9)]
    assert "(A B | C)" in found["explanation"] or "(C | A B)" in found["explanation"]
