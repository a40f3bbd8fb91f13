"""A stopped Postgres's own WAL, read and written as files, and how it stands to the log a term
won: what a compute must do before its Postgres may continue that log.

Postgres 15 names segments by timeline, "log id" and segment; this cluster never leaves timeline
1. A record's end follows from its start and total length: the bytes run over page boundaries,
each page beginning with a header (a long one at a segment's start), and the next record starts
at the next multiple of 8 (MAXALIGN).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

PAGE = 8192  # XLOG_BLCKSZ
SHORT_HEADER = 24  # SizeOfXLogShortPHD
LONG_HEADER = 40  # SizeOfXLogLongPHD, at the first page of a segment
SEGMENT_IDS = 0x1_0000_0000  # WAL segment names count segments per 4 GiB "log id"
TIMELINE = 1
# pg_waldump's line for one record: "rmgr: Heap len (rec/tot): 59/ 59, tx: 724, lsn: 0/01526018, …"
RECORD_LINE = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+),.*?lsn: ([0-9A-F]+)/([0-9A-F]+)")


def segment_name(lsn: int, segment_size: int) -> str:
    segment = lsn // segment_size
    per_id = SEGMENT_IDS // segment_size
    return f"{TIMELINE:08X}{segment // per_id:08X}{segment % per_id:08X}"


def record_end(start: int, total: int, segment_size: int) -> int:
    """Where the next record may start after a record of `total` bytes that starts at `start`."""
    pos, left = start, total
    while left > 0:
        if pos % PAGE == 0:
            pos += LONG_HEADER if pos % segment_size == 0 else SHORT_HEADER
        step = min(PAGE - pos % PAGE, left)
        pos, left = pos + step, left - step
    return (pos + 7) & ~7


def last_record_end(waldump_output: str, segment_size: int) -> int | None:
    """The end of the last record pg_waldump printed: where the valid WAL it read ends."""
    found = None
    for line in waldump_output.splitlines():
        if m := RECORD_LINE.search(line):
            found = m
    if found is None:
        return None
    start = (int(found.group(2), 16) << 32) | int(found.group(3), 16)
    return record_end(start, int(found.group(1)), segment_size)


def files_end(names: Iterable[str], start: int, segment_size: int) -> int:
    """Where the run of segment files from the one holding `start` ends (`start`'s segment's
    beginning when that file is missing). pg_waldump, asked for a segment that is not there, retries
    for 5 s before it gives up; told to stop here (-e), it never asks."""
    present = set(names)
    pos = start - start % segment_size
    while segment_name(pos, segment_size) in present:
        pos += segment_size
    return pos


def first_difference(ours: bytes, theirs: bytes) -> int | None:
    """The offset of the first byte where two equally long ranges differ, None if equal."""
    if ours == theirs:
        return None
    return next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)


@dataclass(frozen=True)
class CatchUp:
    """What a compute does with its stopped Postgres after winning a term with VCL `vcl`.

    `diverges_at` set: its WAL holds records the log does not (a tail of an earlier term that
    the quorum never took): it cannot continue the log and must be rebuilt. Otherwise, `fill`
    is the range of the log its pg_wal lacks (empty when its WAL reaches VCL already; then what
    it holds past VCL is the new term's WAL, which the proxy checks as it streams)."""

    local_end: int
    vcl: int
    diverges_at: int | None = None

    @property
    def fill(self) -> tuple[int, int] | None:
        if self.diverges_at is not None or self.local_end >= self.vcl:
            return None
        return self.local_end, self.vcl


class LocalWal:
    """The pg_wal directory of a stopped Postgres."""

    def __init__(self, pgdata: str, segment_size: int, owner: tuple[int, int] | None = None):
        self.dir = os.path.join(pgdata, "pg_wal")
        self.segment_size = segment_size
        self.owner = owner

    def _path(self, lsn: int) -> str:
        return os.path.join(self.dir, segment_name(lsn, self.segment_size))

    def files_end(self, start: int) -> int:
        """Where the segment files from `start` on end (see `files_end`)."""
        return files_end(os.listdir(self.dir), start, self.segment_size)

    def read(self, start: int, end: int) -> bytes:
        """The bytes [start, end) as pg_wal holds them; shorter where a segment file is missing."""
        out = bytearray()
        pos = start
        while pos < end:
            offset = pos % self.segment_size
            want = min(end - pos, self.segment_size - offset)
            try:
                with open(self._path(pos), "rb") as f:
                    f.seek(offset)
                    chunk = f.read(want)
            except FileNotFoundError:
                break
            out += chunk
            if len(chunk) < want:
                break
            pos += want
        return bytes(out)

    def write(self, lsn: int, data: bytes) -> None:
        """Write `data` at `lsn` into the segment files (created full-size where missing), fsynced:
        crash recovery reads these bytes as if Postgres had received them."""
        view = memoryview(data)
        while view:
            offset = lsn % self.segment_size
            chunk = view[: self.segment_size - offset]
            fd = os.open(self._path(lsn), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size < self.segment_size:
                    os.ftruncate(fd, self.segment_size)
                os.pwrite(fd, chunk, offset)
                os.fsync(fd)
                if self.owner:
                    os.fchown(fd, *self.owner)
            finally:
                os.close(fd)
            lsn, view = lsn + len(chunk), view[len(chunk) :]

    def end_page_at(self, lsn: int) -> None:
        """Zero the rest of `lsn`'s page, so that crash recovery finds the WAL's end exactly there
        whatever bytes an older use of the segment left after it."""
        if lsn % PAGE:
            self.write(lsn, bytes(PAGE - lsn % PAGE))
