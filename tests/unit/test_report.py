"""report.html from real results: the pipeline checks a small history, then the page is rendered.

A hostile history (values, errors, node names, nemesis values and the test's name all
`<script>alert(1)</script>`) renders only as text; the configuration, checker results, the
anomaly's link to the timeline, the timeline's data and the node files are all in the page.
"""

from __future__ import annotations

import base64
import gzip
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from checkers.spark.history_table import OP_COLUMNS
from checkers.spark.pipeline import analyze
from checkers.spark.timeline import CHUNK, build
from core import store
from core.history import FINAL_READS_PROCESS as FINAL
from harness.report import led_at, render_report, with_leaders
from tests.unit.conftest import checks

EVIL = "<script>alert(1)</script>"
OUR_SCRIPTS = 4  # plotly, the page's data, the plots, the timeline


class Page(HTMLParser):
    """The page as a browser parses it: its script elements and its text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[dict[str, Any]] = []
        self.text: list[str] = []
        self.links: dict[str, str] = {}  # data-anomaly id -> link text
        self._in: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "script":
            self.scripts.append({"attrs": attr, "body": ""})
            self._in = "script"
        elif tag == "a" and attr.get("data-anomaly"):
            self.links[str(attr["data-anomaly"])] = ""
            self._in = str(attr["data-anomaly"])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "a"):
            self._in = None

    def data(self) -> Any:
        """What the page's scripts read: the JSON of its report-data element."""
        return json.loads(self.script("report-data")["body"])

    def script(self, id_: str) -> dict[str, Any]:
        return next(s for s in self.scripts if s["attrs"].get("id") == id_)

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            self.scripts[-1]["body"] += data
        else:
            self.text.append(data)
            if self._in is not None:
                self.links[self._in] += data


def unpack(b64: str) -> bytes:
    return gzip.decompress(base64.b64decode(b64))


@pytest.fixture(scope="module")
def hostile_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """A run folder whose append history loses an acknowledged append (its final read misses
    it) and is full of markup."""
    ms = 1_000_000
    events = [
        {"process": "nemesis", "type": "invoke", "f": "start-kill", "value": EVIL},
        {"process": "nemesis", "type": "info", "f": "start-kill", "value": EVIL},
        {"process": 0, "type": "invoke", "f": "txn", "value": [["append", 1, EVIL]]},
        {"process": 0, "type": "ok", "f": "txn", "value": [["append", 1, EVIL]], "node": EVIL},
        {"process": 11, "type": "invoke", "f": "txn", "value": [["append", 2, 1]]},
        {"process": 11, "type": "fail", "f": "txn", "value": [["append", 2, 1]], "error": EVIL},
        {"process": "nemesis", "type": "invoke", "f": "stop-kill", "value": None},
        {"process": "nemesis", "type": "info", "f": "stop-kill", "value": None},
        {"process": FINAL, "type": "invoke", "f": "txn", "value": [["r", 1, None]]},
        {"process": FINAL, "type": "ok", "f": "txn", "value": [["r", 1, []]], "node": "n2"},
    ]
    run = tmp_path_factory.mktemp("run")
    lines = [{"index": i, "time": i * 10 * ms, **e} for i, e in enumerate(events)]
    (run / store.HISTORY).write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = {
        "name": EVIL,
        "cluster": "safekeeper",
        "cluster_options": {"bug": EVIL},
        "workloads": ["append"],
        "nemesis": [EVIL],
        "seed": 7,
        "concurrency": 10,
    }
    results = analyze(spark, run / store.HISTORY, run, checks("append"), {})
    results["config"] = config
    results["plan"] = {  # as a plan records it: the kind's options with their defaults
        "kind": "safekeeper",
        "contract": "durable",
        "options": {"bug": EVIL, "mode": "durable", "variant": "term-history"},
    }
    (run / store.NODES / EVIL).mkdir(parents=True)
    (run / store.NODES / EVIL / "postgres.log").write_text(
        "2026-01-01 LOG:  starting PostgreSQL 15.14 (Debian 15.14-0+deb12u1) on x86_64\n"
    )
    (run / store.NODES / "n2").mkdir()
    (run / store.NODES / "n2" / "control.json").write_text("{}")
    render_report(results, run / store.REPORT, run)
    return run, results


def test_markup_from_the_history_renders_only_as_text(
    hostile_run: tuple[Path, dict[str, Any]],
) -> None:
    run, results = hostile_run
    assert results["verdict"] == "invalid"
    html = (run / store.REPORT).read_text()
    page = Page(html)

    # No script element but the page's own, and none of them holds the hostile text as code.
    assert len(page.scripts) == OUR_SCRIPTS
    assert "<script>alert" not in html
    assert not [s for s in page.scripts if EVIL in s["body"]]
    # As text it is there: the test's name, the planted-bug setting, the nemesis, the node's
    # files, the anomaly's operation (value and node), the failed operation's error.
    text = "".join(page.text)
    assert text.count(EVIL) >= 6
    assert f"nodes/{EVIL}/postgres.log" in text

    # The data the scripts read is JSON with no `<` at all; parsed, it gives the text back.
    data_script = page.script("report-data")
    assert "<" not in data_script["body"] and ">" not in data_script["body"]
    data = json.loads(data_script["body"])
    assert data["faults"][0]["fault"] == "kill"
    details = [json.loads(unpack(chunk)) for chunk in data["timeline"]["details"]]
    values = [v for chunk in details for v in chunk["v"]]
    assert json.dumps([["append", 1, EVIL]], separators=(",", ":")) in values
    assert EVIL in [e for chunk in details for e in chunk["e"]]
    nodes = [data["timeline"]["nodes"][n] for chunk in details for n in chunk["n"] if n >= 0]
    assert nodes.count(EVIL) == 1 and "n2" in nodes


def test_configuration_files_and_the_anomaly_link_to_the_timeline(
    hostile_run: tuple[Path, dict[str, Any]],
) -> None:
    run, results = hostile_run
    html = (run / store.REPORT).read_text()
    page = Page(html)
    text = " ".join(" ".join(page.text).split())
    for shown in ("cluster safekeeper", "contract durable", "variant term-history", "seed 7"):
        assert shown in text
    assert "harness 0.1.0" in text and "postgres 15.14" in text
    # Files are linked relative to the report, their names URL-quoted in the link.
    assert 'href="nodes/%3Cscript%3Ealert%281%29%3C/script%3E/postgres.log"' in html
    assert 'href="nodes/n2/control.json"' in html and 'href="history.jsonl"' in html

    # The lost append's link zooms to its operations: the append and the read that missed it.
    (anomaly,) = results["checkers"]["append"]["anomalies"]
    data = page.data()
    (link_id,) = page.links
    assert link_id == "append-1" and f'id="{link_id}"' in html
    link = data["anomalies"][link_id]
    invoke_times = [op["invoke_time"] / 1e9 for op in anomaly["ops"]]
    assert link["t"][0] == min(invoke_times) and link["t"][1] > max(invoke_times)
    timeline = data["timeline"]
    details = [json.loads(unpack(chunk)) for chunk in timeline["details"]]
    invoke_index = np.concatenate([np.cumsum(chunk["i"]) for chunk in details])
    assert sorted(invoke_index[link["pos"]]) == sorted(op["invoke_index"] for op in anomaly["ops"])


def test_the_timeline_holds_every_operation_in_compact_arrays(
    hostile_run: tuple[Path, dict[str, Any]],
) -> None:
    run, _ = hostile_run
    page = Page((run / store.REPORT).read_text())
    data = page.data()
    timeline = data["timeline"]
    n = timeline["count"]
    assert n == 5  # two nemesis operations, three client transactions
    skeleton = unpack(timeline["skeleton"])
    assert len(skeleton) == 11 * n

    def array(at: int, size: int, kind: str) -> np.ndarray:  # stored byte plane by byte plane
        planes = np.frombuffer(skeleton[at : at + size * n], "u1").reshape(size, n)
        return planes.T.copy().view(kind).ravel()

    starts = np.cumsum(array(0, 4, "<u4")) / 1e6 + timeline["t0"]
    took, lanes, types = array(4 * n, 4, "<u4"), array(8 * n, 2, "<u2"), array(10 * n, 1, "u1")
    assert starts.tolist() == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08])
    assert took.tolist() == [10_000] * n
    # Process 11 is worker 1 going on after an unknown outcome: worker 1's lane.
    assert timeline["lanes"] == ["nemesis", "worker 0", "worker 1", "final reads"]
    assert lanes.tolist() == [0, 1, 2, 0, 3]
    assert [timeline["types"][t] for t in types] == ["info", "ok", "fail", "info", "ok"]
    # The nemesis's operations, drawn at every zoom, carry their details uncompressed.
    assert timeline["nemesis"]["pos"] == [0, 3]
    assert [timeline["fs"][f] for f in timeline["nemesis"]["f"]] == ["start-kill", "stop-kill"]


def test_without_an_operations_table_the_page_says_so_and_links_nothing(
    hostile_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    _, results = hostile_run
    render_report(results, tmp_path / store.REPORT, tmp_path)
    page = Page((tmp_path / store.REPORT).read_text())
    assert "No operations table" in "".join(page.text)
    assert page.links == {}
    data = page.data()
    assert data["timeline"] is None and data["anomalies"] == {}


def test_a_long_history_without_its_concurrency_keeps_every_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12,000 operations (three chunks) of 4 workers that went on as 300 processes; shuffled
    in the table, as Spark may write it, and in order in files of small row groups, as the
    reader writes it (its texts then read batch by batch); a few values null, for which the
    invocations' stand. Their details, made a chunk at a time, are the same."""
    n, workers = 12_000, 4
    rng = np.random.default_rng(1)
    invoke = np.arange(n) * 2
    process = np.arange(n) % workers + workers * (np.arange(n) // 160)  # a new one every 40 ops
    columns = {
        "process": [str(p) for p in process],
        "workload": ["set"] * n,
        "f": ["add"] * n,
        "node": [f"n{p % 3 + 1}" for p in process],
        "type": ["ok"] * n,
        "invoke_index": invoke,
        "invoke_time": invoke * 1_000_000,
        "complete_index": invoke + 1,
        "complete_time": invoke * 1_000_000 + 500_000,
        "invoke_value": [str(i) for i in range(n)],
        "value": [None if i % 997 == 5 else str(i) for i in range(n)],
        "error": [None] * n,
        "latency_ns": [500_000] * n,
        "lsn": invoke * 100,
        "write": [True] * n,
        "warning": [None] * n,
    }
    order = rng.permutation(n)
    kinds = {
        k: pa.int64() if k.endswith(("index", "time", "_ns", "lsn")) else pa.string()
        for k in columns
    } | {"write": pa.bool_()}
    shuffled = {k: np.asarray(v, dtype=object)[order].tolist() for k, v in columns.items()}
    table = pa.table({k: pa.array(v, type=kinds[k]) for k, v in shuffled.items()})
    assert tuple(table.column_names) == OP_COLUMNS
    (tmp_path / "ops.parquet").mkdir()
    pq.write_table(table, tmp_path / "ops.parquet" / "part-0.parquet")

    timeline = build(tmp_path / "ops.parquet")
    assert timeline is not None
    page = timeline.page
    assert page["count"] == n and len(page["details"]) == n // CHUNK + 1
    assert page["lanes"] == [f"worker {w}" for w in range(workers)]
    details = [json.loads(unpack(chunk)) for chunk in page["details"]]
    values = [int(v) for chunk in details for v in chunk["v"]]
    assert values == list(range(n))  # in invocation order, none lost
    assert timeline.positions([invoke[7000], invoke[3], 10**9]) == [3, 7000]
    monkeypatch.setattr("checkers.spark.timeline.GROUP", 1)
    again = build(tmp_path / "ops.parquet")
    assert again is not None and again.page == page
    ordered = table.take(np.argsort(order))  # invocation order
    (tmp_path / "ordered.parquet").mkdir()
    for part, at in enumerate(range(0, n, 4_100)):  # files and row groups across chunks
        path = tmp_path / "ordered.parquet" / f"part-{part}.parquet"
        pq.write_table(ordered.slice(at, 4_100), path, row_group_size=700)
    for group in (1, 100):
        monkeypatch.setattr("checkers.spark.timeline.GROUP", group)
        read = build(tmp_path / "ordered.parquet")
        assert read is not None and read.page == page


def test_the_timeline_details_hold_every_text_as_the_table_has_it(tmp_path: Path) -> None:
    """Texts that JSON escapes (quotes, backslashes, control characters), text beyond ASCII and
    long texts, which are cut, come back from the details' JSON as the table holds them; a null
    value falls back to the invocation's, then to null, and a null error is none."""
    hostile = ['"q" \\ \\" </script>', "a\nb\tc\r\x00\x01\x1f\x7f", "é😀…\u2028", "", "null"]
    texts = [*hostile, "x" * 80, "y" * 81, "é" * 200, "😀" * 161]
    values = [*texts, None, None]
    invoke_values = ["[1]"] * len(texts) + ["invoked", None]
    errors = [*reversed(texts), None, EVIL]
    n = len(values)
    columns = {
        "process": ["0"] * n,
        "workload": ["append"] * n,
        "f": ["txn"] * n,
        "node": [None] * n,
        "type": ["fail"] * n,
        "invoke_index": np.arange(n) * 2,
        "invoke_time": np.arange(n) * 1_000,
        "complete_index": np.arange(n) * 2 + 1,
        "complete_time": np.arange(n) * 1_000 + 500,
        "invoke_value": invoke_values,
        "value": values,
        "error": errors,
        "latency_ns": [500] * n,
    }
    kinds = {
        k: pa.int64() if k.endswith(("index", "time", "_ns")) else pa.string() for k in columns
    }
    (tmp_path / "ops.parquet").mkdir()
    table = pa.table({k: pa.array(v, type=kinds[k]) for k, v in columns.items()})
    pq.write_table(table, tmp_path / "ops.parquet" / "part-0.parquet")

    timeline = build(tmp_path / "ops.parquet")
    assert timeline is not None
    [chunk] = [json.loads(unpack(chunk)) for chunk in timeline.page["details"]]

    def shown(text: str, limit: int) -> str:
        return text if len(text) <= limit else text[:limit] + "…"

    assert chunk["v"] == [shown(v, 80) for v in texts] + ["invoked", "null"]
    assert chunk["e"] == [shown(e, 160) for e in reversed(texts)] + ["", EVIL]
    assert chunk["i"] == [0] + [2] * (n - 1) and chunk["c"] == [1] * n and chunk["n"] == [-1] * n


def test_each_fault_window_names_who_led_at_its_start_and_at_its_first_write() -> None:
    leaders = [
        {"start": 1.0, "end": 10.0, "nodes": ["n1"], "term": 1, "unit": "generation"},
        {"start": 10.0, "end": 16.0, "nodes": [], "term": None, "unit": "term"},
        {"start": 16.0, "end": None, "nodes": ["n2"], "term": 2, "unit": "generation"},
    ]
    availability = {"windows": [{"fault": "partition", "start": 8.0, "end": 15.0,
                                 "first_write_s": 17.0}]}  # fmt: skip
    (window,) = with_leaders(availability, leaders)["windows"]
    assert (window["led_before"], window["led_after"]) == ("n1 (generation 1)", "n2 (generation 2)")
    assert led_at(leaders, 12.0) == "none" and led_at(leaders, 0.5) == "" == led_at(leaders, None)
    assert with_leaders(availability, []) is availability  # a kind that reports no leaders


def test_the_page_says_when_the_cluster_was_whole_again_after_the_last_heal(
    hostile_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    _, results = hostile_run
    render_report(results, tmp_path / store.REPORT, tmp_path)
    assert "whole again" not in (tmp_path / store.REPORT).read_text()  # no kind's judgment
    state = {"valid": True, "anomaly_types": [], "anomalies": [], "recovered_s": 6.25}
    results = results | {"checkers": results["checkers"] | {"cluster-state": state}}
    render_report(results, tmp_path / store.REPORT, tmp_path)
    text = " ".join("".join(Page((tmp_path / store.REPORT).read_text()).text).split())
    assert "found it whole again (every member answering and caught up, one serving) 6.2 s" in text
