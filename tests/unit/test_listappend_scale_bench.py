"""bench/listappend_scale.py: the history it streams (for sizes that would not fit in memory as
objects) is the very file the runner's writer makes of the same transactions held in a list, and
the checker judges it as it judges those transactions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from checkers.listappend import check
from checkers.listappend.history import write_history
from workloads.base import WorkloadOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from listappend_scale import generate, stream_history


@pytest.mark.parametrize(("nodes", "primaries"), [(1, 1), (2, 2)])
def test_streamed_history_is_the_written_one(tmp_path: Path, nodes: int, primaries: int) -> None:
    # Failures and indeterminate outcomes often enough that both kinds of line are written.
    shape = (3_000, 6, WorkloadOptions(), 7, 0.1, 0.05, True, nodes, primaries, 0.5)
    held, streamed = tmp_path / "held.jsonl", tmp_path / "streamed.jsonl"
    txns = generate(*shape)
    write_history(txns, held)
    assert stream_history(streamed, *shape) == len(txns) == 3_001  # and the final read
    assert streamed.read_bytes() == held.read_bytes()
    assert {t.type for t in txns} == {"ok", "fail", "info"}
    # A split brain is what the checker must find in the second shape, and only there.
    assert check(txns, "serializable")["valid"] is (primaries == 1)
