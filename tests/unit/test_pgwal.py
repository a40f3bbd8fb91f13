"""A stopped Postgres's WAL as the compute agent reads it: where records end across page and
segment headers, what pg_waldump's last record says, and what a compute must do with its WAL
after winning a term (fill the log it lacks, go on, or stand down)."""

from __future__ import annotations

from pathlib import Path

from clusters.kinds.postgres import two_phase_records
from systems.walkeeper.pgwal import (
    PAGE,
    CatchUp,
    LocalWal,
    files_end,
    first_difference,
    last_record_end,
    record_end,
    segment_name,
)

MB16 = 16 << 20
WALDUMP = """\
rmgr: Heap        len (rec/tot):     59/    59, tx:        724, lsn: 0/01526018, prev 0/01525FC0, desc: INSERT off 96
rmgr: Transaction len (rec/tot):    405/   405, tx:        724, lsn: 0/01526058, prev 0/01526018, desc: COMMIT
"""  # noqa: E501  (pg_waldump's own lines)


def test_a_record_within_a_page_ends_at_the_next_multiple_of_eight() -> None:
    # pg_waldump itself said: "invalid record length at 0/15261F0" after this record
    assert record_end(0x1526058, 405, MB16) == 0x15261F0


def test_a_record_that_crosses_a_page_skips_the_next_page_s_short_header() -> None:
    start = 0x1528000 + PAGE - 100  # 100 bytes left on this page
    assert record_end(start, 300, MB16) == 0x1528000 + PAGE + 24 + 200


def test_a_record_that_crosses_a_segment_skips_the_long_header() -> None:
    start = 2 * MB16 - 40
    assert record_end(start, 100, MB16) == 2 * MB16 + 40 + 64  # 60 bytes, aligned to 64


def test_a_record_that_fills_its_page_ends_at_the_boundary() -> None:
    assert record_end(0x1528000 + PAGE - 64, 64, MB16) == 0x1528000 + PAGE


def test_a_record_longer_than_a_page_pays_a_header_per_page() -> None:
    start = 0x1520000 + 24  # just after a page header
    total = 3 * PAGE
    pages = 3  # the record's bytes spill onto three further pages
    assert record_end(start, total, MB16) == start + total + pages * 24


def test_the_wal_ends_after_the_last_record_pg_waldump_printed() -> None:
    assert last_record_end(WALDUMP, MB16) == 0x15261F0
    assert last_record_end(WALDUMP.splitlines()[0], MB16) == 0x1526058
    assert last_record_end("pg_waldump: error: could not find file", MB16) is None


def test_first_difference() -> None:
    assert first_difference(b"abcdef", b"abcdef") is None
    assert first_difference(b"abcdef", b"abcXef") == 3
    assert first_difference(b"", b"") is None


def test_a_postgres_behind_vcl_is_filled_up_to_it() -> None:
    assert CatchUp(local_end=1000, vcl=5000).fill == (1000, 5000)


def test_a_postgres_at_or_past_vcl_needs_nothing() -> None:
    assert CatchUp(local_end=5000, vcl=5000).fill is None
    assert CatchUp(local_end=9000, vcl=5000).fill is None


def test_a_divergent_postgres_is_never_filled() -> None:
    assert CatchUp(local_end=1000, vcl=5000, diverges_at=800).fill is None


def test_segment_names_count_log_ids() -> None:
    assert segment_name(0x1526058, MB16) == "000000010000000000000001"
    assert segment_name(0x1_0500_0000, MB16) == "000000010000000100000005"


def test_the_files_end_where_the_run_of_segments_from_the_start_breaks() -> None:
    names = [segment_name(n * MB16, MB16) for n in (1, 2, 3, 5)] + ["archive_status"]
    assert files_end(names, 0x1526058, MB16) == 4 * MB16  # 1, 2, 3; 5 is past the gap
    assert files_end(names, 5 * MB16 + 100, MB16) == 6 * MB16
    assert files_end(names, 4 * MB16 + 100, MB16) == 4 * MB16  # its own segment is missing


def test_local_wal_writes_and_reads_across_segments(tmp_path: Path) -> None:
    size = 4 * PAGE  # a small segment keeps the files small
    (tmp_path / "pg_wal").mkdir()
    wal = LocalWal(str(tmp_path), size)
    data = bytes(range(256)) * (2 * PAGE // 256)
    start = size - PAGE  # half in one segment, half in the next
    wal.write(start, data)
    assert wal.read(start, start + len(data)) == data
    files = sorted(p.name for p in (tmp_path / "pg_wal").iterdir())
    assert files == [segment_name(start, size), segment_name(start + PAGE, size)]
    assert all((tmp_path / "pg_wal" / f).stat().st_size == size for f in files)


def test_local_wal_reads_short_where_a_segment_is_missing(tmp_path: Path) -> None:
    size = 4 * PAGE
    (tmp_path / "pg_wal").mkdir()
    wal = LocalWal(str(tmp_path), size)
    wal.write(0, b"x" * 100)
    assert wal.read(size - 10, size + 10) == bytes(10)  # the rest of segment 0 is zeros
    assert wal.read(size, size + 10) == b""


def test_the_page_after_the_end_is_zeroed(tmp_path: Path) -> None:
    size = 4 * PAGE
    (tmp_path / "pg_wal").mkdir()
    wal = LocalWal(str(tmp_path), size)
    wal.write(0, b"\xff" * (2 * PAGE))
    wal.end_page_at(100)
    assert wal.read(0, 100) == b"\xff" * 100
    assert wal.read(100, PAGE) == bytes(PAGE - 100)
    assert wal.read(PAGE, 2 * PAGE) == b"\xff" * PAGE  # later pages are left alone


XACT_DUMP = """\
rmgr: Transaction len (rec/tot):     66/    66, tx:        723, lsn: 0/015006D0, prev 0/01500630, desc: COMMIT 2026-11-28 09:03:48.884477 UTC; inval msgs: snapshot 2396
rmgr: Transaction len (rec/tot):    242/   242, tx:        725, lsn: 0/015167A8, prev 0/01516768, desc: PREPARE gid h-a: 2026-11-28 09:03:49.304327 UTC
rmgr: Transaction len (rec/tot):    242/   242, tx:        726, lsn: 1/015168E0, prev 0/015168A0, desc: PREPARE gid h-b: 2026-11-28 09:03:49.337373 UTC
rmgr: Transaction len (rec/tot):     42/    42, tx:          0, lsn: 1/015169D8, prev 1/015168E0, desc: COMMIT_PREPARED 725: 2026-11-28 09:03:49.369371 UTC
rmgr: XLOG        len (rec/tot):    114/   114, tx:          0, lsn: 1/01516A08, prev 1/015169D8, desc: CHECKPOINT_SHUTDOWN redo 0/1555E48; tli 1; prev tli 1; fpw true; xid 0:740; oid 24576; multi 1; offset 0; oldest xid 716 in DB 1; oldest multi 1 in DB 1; oldest/newest commit timestamp xid: 0/0; oldest running xid 0; shutdown
rmgr: XLOG        len (rec/tot):    114/   114, tx:          0, lsn: 1/01516A80, prev 1/01516A08, desc: CHECKPOINT_ONLINE redo 1/1516A08; tli 1; prev tli 1; fpw true; xid 0:739; oid 24576; multi 1; offset 0; oldest xid 716 in DB 1; oldest multi 1 in DB 1; oldest/newest commit timestamp xid: 0/0; oldest running xid 739; online
rmgr: Transaction len (rec/tot):     42/    42, tx:          0, lsn: 1/01516B08, prev 1/01516A80, desc: ABORT_PREPARED 726: 2026-11-28 09:03:49.398118 UTC
pg_waldump: error: error in WAL record at 1/1516A78: invalid record length at 1/1516AA0: wanted 24, got 0
"""  # noqa: E501  (pg_waldump's own lines, Postgres 15)


def test_two_phase_records_and_instance_boundaries_are_read_and_the_rest_passed_over() -> None:
    assert two_phase_records(XACT_DUMP) == [
        [0x15167A8, "prepare", 725, "h-a"],
        [(1 << 32) | 0x15168E0, "prepare", 726, "h-b"],
        [(1 << 32) | 0x15169D8, "commit", 725, None],
        [(1 << 32) | 0x1516A08, "boundary", None, None],
        [(1 << 32) | 0x1516B08, "abort", 726, None],
    ]
