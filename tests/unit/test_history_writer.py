"""The history writer: every event is on disk as soon as append returns."""

import json
import threading
from pathlib import Path

from core.history import HistoryWriter, has_partial_last_line


def test_events_are_flushed_as_they_are_appended(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    writer.append(process=0, type="invoke", f="read", value=None)
    lines = path.read_text().splitlines()  # read while the writer is still open
    assert json.loads(lines[0])["f"] == "read"
    writer.close()


def test_indices_are_dense_and_times_ordered_under_concurrency(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:

        def work(p: int) -> None:
            for _ in range(200):
                writer.append(process=p, type="invoke", f="add", value=p)

        threads = [threading.Thread(target=work, args=(p,)) for p in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["index"] for e in events] == list(range(1600))
    times = [e["time"] for e in events]
    assert times == sorted(times)


def test_partial_last_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"index":0}\n{"ind')
    assert has_partial_last_line(path)
    path.write_text('{"index":0}\n')
    assert not has_partial_last_line(path)
