"""The append workload's by-key table (checkers/spark/append_micro_ops.py): the store writes rows
Spark's explode would give, each key within one row group, so that the per-key pass needs no
shuffle; with that table the pass finds the same edges and cases as without it, and it takes no
history whose rows the two ways might spell differently."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from checkers import reader
from checkers.listappend.history import Txn, write_history
from checkers.spark import append_micro_ops
from checkers.spark.append_keys import KeyPass, _analysed, _each_key_once, key_pass
from checkers.spark.append_micro_ops import COLUMNS, explode, store_by_key
from checkers.spark.history_table import store_operations
from checkers.spark.pipeline import BY_KEY_TABLE, analyze
from core.history import NEMESIS
from tests.unit.test_append_pipeline import perturbed
from tests.unit.test_listappend import CASES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from listappend_scale import generate

from tests.unit.conftest import checks
from workloads.base import WorkloadOptions

WriteHistory = Callable[..., Path]


def stored(spark: SparkSession, path: Path, out: Path) -> tuple[DataFrame, DataFrame | None]:
    """The operations table of the history and its table by key (None when not built), written
    as the pipeline writes them."""
    built: list[bool] = []
    by_key = out / "by-key.parquet"
    store_operations(
        path,
        out / "ops.parquet",
        "append",
        lambda ops: built.append(store_by_key(ops, by_key)),
    )
    ops = spark.read.parquet(str(out / "ops.parquet"))
    return ops, spark.read.parquet(str(by_key)) if built == [True] else None


def outcome(passed: KeyPass) -> tuple[Any, ...]:
    """What the pass found, in an order that does not depend on the partitions."""
    ends = (passed.edges.src, passed.edges.dst, passed.edges.kind)
    edges = zip(*ends, passed.edge_keys.to_pylist(), strict=True)
    cases = {c: sorted(json.dumps(x, sort_keys=True) for x in v) for c, v in passed.cases.items()}
    t = passed.txns
    return sorted(edges), cases, [c.tolist() for c in (t.index, t.complete, t.process, t.type)]


def same_pass(ops: DataFrame, by_key: DataFrame) -> None:
    """The pass with the table by key finds what the pass over the operations finds, and the
    table holds the rows Spark's explode gives."""
    assert outcome(key_pass(ops, by_key)) == outcome(key_pass(ops))
    txn_ops = ops.filter((ops.process != NEMESIS) & (ops.f == "txn"))
    exploded = explode(txn_ops).select(*COLUMNS).collect()
    assert sorted(by_key.select(*COLUMNS).collect()) == sorted(exploded)


@contextmanager
def partition_bytes(spark: SparkSession, size: int) -> Iterator[None]:
    """Spark reads files in splits of about `size` bytes for a while (many partitions)."""
    names = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    before = [spark.conf.get(n) for n in names]
    for name in names:
        spark.conf.set(name, str(size))
    try:
        yield
    finally:
        for name, value in zip(names, before, strict=True):
            spark.conf.set(name, value)


def generated(seed: int, count: int = 600) -> list[Txn]:
    """A workload-like history of `count` transactions over two nodes, one read perturbed (so
    with cases to find)."""
    return perturbed(generate(count, 6, WorkloadOptions(), seed, 0.05, 0.05, True, nodes=2), seed)


def test_a_generated_history_gets_the_same_pass_from_its_table_by_key(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = tmp_path / "history.jsonl"
    write_history(generated(5), path)
    ops, by_key = stored(spark, path, tmp_path)
    assert by_key is not None
    passed = key_pass(ops, by_key)
    assert len(passed.edges.src) > 1000 and passed.cases["append"]
    same_pass(ops, by_key)
    # the explanations' edges: their keys read again (here those of keys 0 and 3)
    reasons = [
        p.reasons({i for i, k in enumerate(p.edge_keys.to_pylist()) if k in ("0", "3")})
        for p in (passed, key_pass(ops))
    ]
    assert reasons[0] == reasons[1] != {}


def test_the_table_by_key_is_the_same_when_its_transactions_are_decoded_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are made a piece of the transactions at a time (a large history's
    micro-operations never all exist as Python objects); pieces of 97 give the rows of one."""
    path = tmp_path / "history.jsonl"
    write_history(generated(7), path)
    ops = reader.read(path, "append").ops
    assert store_by_key(ops, tmp_path / "whole")
    monkeypatch.setattr(append_micro_ops, "_DECODED_TXNS", 97)
    assert store_by_key(ops, tmp_path / "pieces")
    whole, pieces = (pq.read_table(tmp_path / n) for n in ("whole", "pieces"))
    assert whole.num_rows > 1000 and pieces.to_pylist() == whole.to_pylist()
    # among another workload's operations, picked by position: the same rows
    other = ops.slice(0, 500).set_column(ops.schema.get_field_index("workload"), "workload",
                                         pa.array(["bank"] * 500))  # fmt: skip
    both = pa.concat_tables([other, ops, other])
    mine = pa.array([False] * 500 + [True] * ops.num_rows + [False] * 500)
    assert store_by_key(both, tmp_path / "among", mine)
    assert pq.read_table(tmp_path / "among").to_pylist() == whole.to_pylist()


def test_each_crafted_history_gets_the_same_pass_from_its_table_by_key(
    spark: SparkSession, tmp_path: Path
) -> None:
    for name, (history, near_miss, _) in sorted(CASES.items()):
        for number, txns in enumerate((history, near_miss)):
            path = tmp_path / f"{name}-{number}.jsonl"
            write_history(txns, path)
            ops, by_key = stored(spark, path, tmp_path / f"{name}-{number}")
            assert by_key is not None, name
            same_pass(ops, by_key)


TXN = {"process": 0, "f": "txn", "workload": "append"}


def txn_events(*values: Any) -> list[dict[str, Any]]:
    """An ok transaction for each value (its invocation reads nothing), on process 0."""
    events = []
    for value in values:
        invoked = [[m[0], m[1], None] if m[0] == "r" else m for m in value]
        events += [
            {**TXN, "type": "invoke", "value": invoked},
            {**TXN, "type": "ok", "value": value},
        ]
    return events


def test_unusual_keys_values_and_outcomes_get_the_same_pass(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    """Keys of both kinds (1 and "1" apart), text beyond ASCII, empty and odd arguments, a
    failed, an unfinished and an empty transaction, a nemesis and another process among them."""
    events = [
        *txn_events(
            [["append", 1, 1], ["append", "1", "a"], ["append", -7, [1, [2, "x"]]]],
            [["r", 1, [1]], ["r", "1", ["a"]], ["r", "", None], ["append", "é中 😀", None]],
            [],
            [["r", -7, [[1, [2, "x"]]]], ["r", 1, 5], ["append", 0, "}"]],
        ),
        {"process": NEMESIS, "type": "info", "f": "start-partition", "value": ["n1"]},
        {**TXN, "process": 1, "type": "invoke", "value": [["append", 1, 2]]},
        {**TXN, "process": 1, "type": "fail", "value": [["append", 1, 2]], "error": "40001"},
        {**TXN, "process": 2, "type": "invoke", "value": [["append", "1", "b"], ["r", 1, None]]},
        {"process": NEMESIS, "type": "info", "f": "stop-partition", "value": None},
        *txn_events([["r", "é中 😀", [None]], ["r", 0, ["}"]]]),
    ]
    path = tmp_path / "history.jsonl"
    path.write_text(
        "".join(
            json.dumps({"index": i, "time": i, **e}, ensure_ascii=False) + "\n"
            for i, e in enumerate(events)
        )
    )
    ops, by_key = stored(spark, path, tmp_path)
    assert by_key is not None
    same_pass(ops, by_key)


@pytest.mark.parametrize(
    "value",
    [
        [["w", 1, 2]],  # another f: explode leaves it out
        [["r", 1]],  # too short
        [["append", 1, 2, 3]],  # too long
        [["append", [1], 2]],  # a key that is a list
        [["append", True, 2]],
        [["append", None, 2]],
        [["append", 'a"b', 2]],  # a key with an escape in its text
        [["append", 1, "a\tb"]],  # a value with one
        [["append", 1, {"b": 1, "a": 2}]],  # an object, its members sorted by Spark
        [["append", 1, 10**40]],  # a double to Spark's variant
        "not a list",
        None,
    ],
)
def test_a_history_of_another_shape_gets_no_table_by_key_and_the_same_verdict(
    value: Any, spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    events = [
        *txn_events([["append", 1, 1]], [["r", 1, [1]]]),
        {**TXN, "process": 1, "type": "invoke", "value": value},
        {**TXN, "process": 1, "type": "ok", "value": value},
    ]
    path = write_history(events)
    assert stored(spark, path, tmp_path)[1] is None
    out = tmp_path / "out"
    out.mkdir()
    (out / BY_KEY_TABLE.format(workload="append")).mkdir()  # an earlier check's
    result = analyze(spark, path, out, checks("append"), {})
    assert not (out / BY_KEY_TABLE.format(workload="append")).exists()
    assert result["valid"] is True


def test_no_key_spans_two_row_groups_so_spark_reads_each_key_in_one_partition(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(append_micro_ops, "_GROUP_ROWS", 5)
    path = tmp_path / "history.jsonl"
    write_history(generated(3), path)
    assert stored(spark, path, tmp_path)[1] is not None
    (file,) = (tmp_path / "by-key.parquet").glob("*.parquet")
    groups = pq.ParquetFile(file)
    keys = [
        groups.read_row_group(g, ["key"]).column("key").to_pylist()
        for g in range(groups.num_row_groups)
    ]
    assert len(keys) > 20
    assert all(a[-1] != b[0] for a, b in itertools.pairwise(keys))
    with partition_bytes(spark, 512):
        by_key = spark.read.parquet(str(tmp_path / "by-key.parquet"))
        assert by_key.rdd.getNumPartitions() > 10
        assert _each_key_once(_analysed(by_key))


def test_a_key_split_between_partitions_is_caught_and_the_pass_shuffles(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Should a key's rows reach two partitions after all (row groups cut inside keys here),
    the pass sees a key analysed twice and analyses the table again, shuffled by key."""
    path = tmp_path / "history.jsonl"
    write_history(generated(4, 150), path)  # each of its hundreds of partitions is a task
    ops, by_key = stored(spark, path, tmp_path)
    assert by_key is not None
    cut = tmp_path / "cut.parquet"
    cut.mkdir()
    pq.write_table(by_key.toArrow(), cut / "part-0.parquet", row_group_size=7)
    with partition_bytes(spark, 512):
        split = spark.read.parquet(str(cut))
        assert not _each_key_once(_analysed(split))
        assert outcome(key_pass(ops, split)) == outcome(key_pass(ops))


def test_the_pipeline_builds_the_table_by_key_of_the_append_workloads_transactions_only(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    """Transactions of another workload stay out of it, as they stay out of the operations the
    append checker gets: one of them here reads key 1 in an order no append transaction saw."""
    events = [
        *txn_events([["append", 1, 1], ["append", 1, 2]], [["r", 1, [1, 2]]]),
        {**TXN, "process": 3, "workload": "other", "type": "invoke", "value": [["r", 1, None]]},
        {**TXN, "process": 3, "workload": "other", "type": "ok", "value": [["r", 1, [2, 1]]]},
    ]
    out = tmp_path / "out"
    result = analyze(spark, write_history(events), out, checks("append"), {})
    table = spark.read.parquet(str(out / BY_KEY_TABLE.format(workload="append")))
    assert sorted(table.select("txn").distinct().toPandas()["txn"]) == [0, 2]
    assert result["checkers"]["append"]["valid"] is True
    assert result["checkers"]["split-brain"]["valid"] is True
