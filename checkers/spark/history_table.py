"""The history as Spark tables: validated events, and operations (invocations with completions).

Checkers work on the operations table. Values stay JSON text in both tables (Parquet-friendly, and
each checker parses the shape it expects); `op_dicts` turns operations back into plain dicts with
parsed values for the anomalies that checkers report. `store_operations` writes the operations
table of a history in one pass when the history is well formed, and otherwise goes through
`load_events` and `operations`, which say what is wrong.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checkers.operations import op_dict
from checkers.spark import history_fast
from checkers.spark.session import Spark, session_of
from core.errors import BadInput
from core.history import EVENT_TYPES, INT64, NEMESIS, OP_COLUMNS, Writes, has_partial_last_line

# The raw line is parsed once; process, f and value stay variants so that their JSON types can be
# checked (a StringType column would turn 3, "3" and [3] all into text).
_EVENT_SCHEMA = (
    "index bigint, time bigint, process variant, type string, f variant, value variant, "
    "node string, error string, workload string, lsn bigint, write boolean"
)
# A value is stored as the JSON text Spark's reader copies from the line when it reads the value
# as a string (cheaper than building a variant and writing it out again), except a JSON string,
# which that copy gives unquoted: there the variant's JSON text is written.
_RAW_VALUE = "value string"
PARTIAL_LINE_NOTE = "the last line was cut off by a crash and was skipped"

# Small row groups: set reads are large values, and readers buffer a whole row group.
ROW_GROUP_BYTES = 16 * 1024 * 1024


def store_operations(
    spark: Spark,
    path: Path,
    table: Path,
    workload: str | None = None,
    also: Callable[[pa.Table], None] | None = None,
    writes: Writes | None = None,
) -> tuple[int, list[str]]:
    """Write the history's operations table at `table` (Parquet, replacing it): (events, notes).

    The table, the event count, the notes and any BadInput are those of
    `operations(load_events(spark, path))`, with client operations that name no workload tagged
    `workload` when one is given (a single-workload history written by hand need not tag its
    events). A well-formed history is read by the driver in one pass (history_fast.py);
    anything that pass does not vouch for (a malformed or unusual line, a broken alternation, a
    shared index) sends the history down the detailed path, which finds it and says what it is
    or, when it is only unusual, builds the table itself. Nothing is left behind when the history
    is bad: the table is written beside its place and renamed into it. `also` gets the table as
    Arrow when the driver's pass built it (to build more tables from it while it is at hand).
    A client operation whose invocation did not record `write` (a history written before it
    was, or by hand) is given the workloads' declaration, `writes`.
    """
    if not path.is_file():
        raise BadInput(f"history file {path} does not exist")
    if not _has_content(path):
        raise BadInput(
            f"{path} holds no events: there is nothing to check (a run that recorded nothing, "
            "or not the history meant?)"
        )
    created = next((d for d in reversed(table.parents) if not d.exists()), None)
    table.parent.mkdir(parents=True, exist_ok=True)
    draft = table.with_name(f".{table.name}.{uuid.uuid4().hex}")
    try:
        stored = _store_fast(spark, path, draft, workload, also, writes)
        if stored is None:
            loaded, notes = load_events(session_of(spark), path)
            stored = loaded.count(), notes
            _write(_tagged(operations(loaded), workload), draft)
            _fill_stored(draft, writes)
    except BaseException:
        shutil.rmtree(created or draft, ignore_errors=True)
        raise
    shutil.rmtree(table, ignore_errors=True)
    draft.rename(table)
    return stored


def _has_content(path: Path, chunk: int = 1 << 16) -> bool:
    """Whether the file holds anything but whitespace (read only until it does)."""
    with path.open("rb") as f:
        while data := f.read(chunk):
            if data.strip():
                return True
    return False


def load_events(spark: SparkSession, path: Path) -> tuple[DataFrame, list[str]]:
    """The history's events, validated, with notes about what was skipped.

    Columns: index, time, process (text: a number or "nemesis"), type, f, value (JSON text),
    node, error, workload. Blank lines are ignored. A malformed line is a BadInput naming it, except
    an unparseable last line with no newline after it: a crash cut it off, so it is skipped.
    """
    if not path.is_file():
        raise BadInput(f"history file {path} does not exist")
    skip_last = _cut_off(path) is not None
    # Parsed once and kept: validation, counting and pairing all read it.
    checked = _checked(_lines(spark, path)).localCheckpoint()
    stats = checked.agg(
        F.count(F.when(~F.col("good"), 1)).alias("bad"),
        F.count(F.when(F.col("good"), 1)).alias("events"),
        F.count_distinct(F.when(F.col("good"), F.col("index"))).alias("indices"),
    ).collect()[0]
    if stats["bad"] > int(skip_last):
        raise BadInput(_first_malformed(path, stats["bad"] - int(skip_last)))
    if stats["indices"] < stats["events"]:
        raise BadInput(_duplicate_index(path))

    events = checked.filter("good").drop("good")
    notes = [PARTIAL_LINE_NOTE] if skip_last and stats["bad"] == 1 else []
    return events, notes


def operations(events: DataFrame) -> DataFrame:
    """Pair each invocation with the next event of its process, its completion.

    An invocation with no completion (the process's last) gets type "info": its outcome is unknown.
    Nemesis events are kept; a nemesis completion with no invocation stands as an operation alone.
    A client completion with no invocation, or a second invocation before the first completed,
    means the history is broken: BadInput.
    """
    # Kept: the problem check and every checker read it; pairing moves the largest values.
    rows = _paired(events).localCheckpoint()
    first = rows.filter(F.col("problem").isNotNull()).orderBy("invoke_index").first()
    if first is not None:
        what = first["problem"].format(prev=first["prev_index"], prev_f=first["prev_f"])
        raise BadInput(
            f"history event index {first['invoke_index']} (process {first['process']}, "
            f"{first['event_type']} {first['f']!r}) {what}: every operation is an invoke "
            "followed by its completion on the same process"
        )
    return rows.filter(F.col("problem").isNull()).select(*OP_COLUMNS)


def _store_fast(
    spark: Spark,
    path: Path,
    draft: Path,
    workload: str | None,
    also: Callable[[pa.Table], None] | None,
    writes: Writes | None,
) -> tuple[int, list[str]] | None:
    """The driver's one pass: (events, notes) with the table written at `draft`, or None to go
    the detailed way. A last line cut off by a crash is left out when it is no event to the
    detailed path either."""
    end = path.stat().st_size
    cut = _cut_off(path)
    if cut is not None:
        if not _only_bad_line(session_of(spark), cut):
            return None
        end -= len(cut.encode())
    built = history_fast.operations(path, end, workload)
    if built is None:
        return None
    ops, events = built
    ops = fill_writes(ops, writes)
    if also is not None:
        also(ops)
    draft.mkdir()
    rows = ROW_GROUP_BYTES * ops.num_rows // max(ops.nbytes, 1)
    pq.write_table(
        ops,
        draft / "part-00000.parquet",
        row_group_size=max(rows, 1),
        use_dictionary=["process", "workload", "f", "node", "type", "error"],
        store_schema=False,
    )
    return events, [PARTIAL_LINE_NOTE] if cut is not None else []


def fill_writes(ops: pa.Table, writes: Writes | None) -> pa.Table:
    """The operations with `write` given, where the invocation did not record it, by `writes`
    (the workloads' declaration); the nemesis's operations keep none."""
    missing = pc.and_(pc.is_null(ops["write"]), pc.not_equal(ops["process"], NEMESIS))
    if writes is None or not pc.any(missing).as_py():
        return ops
    at = pc.indices_nonzero(missing)
    rows = ops.select(["workload", "f", "invoke_value"]).take(at).to_pylist()
    values = ops["write"].to_pylist()
    for i, row in zip(at.to_pylist(), rows, strict=True):
        value = None if row["invoke_value"] is None else json.loads(row["invoke_value"])
        values[i] = writes(row["workload"], row["f"], value)
    column = ops.schema.get_field_index("write")
    return ops.set_column(column, "write", pa.array(values, pa.bool_()))


def _fill_stored(table: Path, writes: Writes | None) -> None:
    """fill_writes on a table Spark wrote (its files rewritten where it changes them)."""
    if writes is None:
        return
    for part in sorted(table.glob("*.parquet")):
        ops = pq.read_table(part)
        filled = fill_writes(ops, writes)
        if filled is not ops:
            pq.write_table(filled, part, row_group_size=max(1, ops.num_rows))


def _only_bad_line(spark: SparkSession, line: str) -> bool:
    """Whether the cut-off last `line` is no event to the detailed path. A line that is not
    valid UTF-8 (read with replacements here) is left to the detailed path."""
    if "\ufffd" in line:
        return False
    lines = _lines(spark, spark.createDataFrame([(line,)], "value string"))
    return [row["good"] for row in _checked(lines).select("good").collect()] == [False]


def _cut_off(path: Path) -> str | None:
    """The last line when a crash cut it off (no newline after it, and not JSON), else None."""
    if not has_partial_last_line(path):
        return None
    line = _last_line(path)
    return None if _is_json(line) else line


def _lines(spark: SparkSession, source: Path | DataFrame) -> DataFrame:
    """The history's lines as Spark reads them (column `value`), blank ones left out."""
    if isinstance(source, Path):
        source = spark.read.option("lineSep", "\n").text(str(source))
    return source.filter(F.trim("value") != "")


def _checked(lines: DataFrame) -> DataFrame:
    """The events of load_events, and the lines that are no event, after a `good` column."""
    parsed = lines.select(
        F.col("value").alias("line"),
        F.from_json("value", _EVENT_SCHEMA, {"allowSingleQuotes": "false"}).alias("e"),
    )
    process_ok = F.schema_of_variant("e.process").isin("BIGINT", "STRING")
    f_ok = F.schema_of_variant("e.f") == "STRING"
    good = (
        F.col("e.index").isNotNull()
        & F.col("e.time").isNotNull()
        & process_ok
        & F.col("e.type").isin(*EVENT_TYPES)
        & f_ok
    )
    # A field left out (no process, no type) is null to Spark: not an event either.
    good = F.coalesce(good, F.lit(False))
    raw = F.from_json("line", _RAW_VALUE, {"allowSingleQuotes": "false"})["value"]
    value = F.when(F.schema_of_variant("e.value") == "STRING", F.to_json("e.value")).otherwise(raw)
    return _event_columns(
        parsed,
        good,
        F.expr("variant_get(e.process, '$', 'string')"),
        F.expr("variant_get(e.f, '$', 'string')"),
        value,
    )


def _event_columns(
    parsed: DataFrame, good: Column, process: Column, f: Column, value: Column
) -> DataFrame:
    """The events table's columns, after `good`, from a parse whose fields are `e.…` (`value`:
    the value's JSON text, null for a JSON null)."""
    return parsed.select(
        good.alias("good"),
        F.col("e.index").alias("index"),
        F.col("e.time").alias("time"),
        process.alias("process"),
        F.col("e.type").alias("type"),
        f.alias("f"),
        F.coalesce(value, F.lit("null")).alias("value"),
        F.col("e.node").alias("node"),
        F.col("e.error").alias("error"),
        F.col("e.workload").alias("workload"),
        F.col("e.lsn").alias("lsn"),
        F.col("e.write").alias("write"),
    )


def _paired(events: DataFrame) -> DataFrame:
    """Each invocation with its completion (the next event of its process), each lone nemesis
    completion, and each event that breaks the alternation, with `problem` saying how."""
    by_process = Window.partitionBy("process").orderBy("index")
    outcome = ("index", "time", "type", "value", "node", "error", "workload", "lsn")
    paired = events.select(
        "*",
        F.lag(F.struct("index", "type", "f")).over(by_process).alias("prev"),
        F.lead(F.struct(*outcome)).over(by_process).alias("next"),
    )
    invoke = F.col("type") == "invoke"
    follows_invoke = F.coalesce(F.col("prev.type") == "invoke", F.lit(False))
    nemesis = F.col("process") == NEMESIS
    problem = F.when(~nemesis, _problem(invoke, follows_invoke))
    # A nemesis completion with no invocation is its own completion.
    done = F.when(invoke, F.when(F.col("next.type") != "invoke", F.col("next"))).otherwise(
        F.struct(*outcome)
    )
    return paired.filter(invoke | (nemesis & ~follows_invoke) | problem.isNotNull()).select(
        problem.alias("problem"),
        F.col("prev.index").alias("prev_index"),
        F.col("prev.f").alias("prev_f"),
        "process",
        F.col("type").alias("event_type"),
        F.coalesce("workload", done.workload).alias("workload"),
        "f",
        F.coalesce(done.node, "node").alias("node"),
        F.coalesce(done.type, F.lit("info")).alias("type"),
        F.col("index").alias("invoke_index"),
        F.col("time").alias("invoke_time"),
        done.index.alias("complete_index"),
        done.time.alias("complete_time"),
        F.col("value").alias("invoke_value"),
        F.coalesce(done.value, "value").alias("value"),
        done.error.alias("error"),
        (done.time - F.col("time")).alias("latency_ns"),
        done.lsn.alias("lsn"),
        F.when(F.col("process") != NEMESIS, F.col("write")).alias("write"),
    )


def _tagged(ops: DataFrame, workload: str | None) -> DataFrame:
    """The operations with `workload` for client operations that name none (when given)."""
    if workload is None:
        return ops
    client = F.col("process") != NEMESIS
    return ops.withColumn("workload", F.when(client, F.coalesce("workload", F.lit(workload))))


def _write(ops: DataFrame, table: Path) -> None:
    """The operations as Parquet at `table`, each file in invocation order.

    Nothing reads the table in file order (the checkers order what they need), so there is no
    global sort, which would move every operation once more; sorted files keep each row group's
    index range narrow for lookups by invoke_index."""
    ops.sortWithinPartitions("invoke_index").write.mode("overwrite").option(
        "parquet.block.size", ROW_GROUP_BYTES
    ).parquet(str(table))


def nemesis_ops(ops: DataFrame) -> list[dict[str, Any]]:
    """The nemesis's operations, as plain operations (two per fault: few)."""
    rows = ops.filter(F.col("process") == NEMESIS).select(*OP_COLUMNS).toArrow().to_pylist()
    return [op_dict(row) for row in rows]


def op_dicts(ops: DataFrame, indices: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The operations with these invoke indices as dicts, values parsed: for anomaly reports."""
    wanted = sorted(set(indices))
    if not wanted:
        return {}
    rows = ops.filter(F.col("invoke_index").isin(wanted)).select(*OP_COLUMNS).collect()
    return {row["invoke_index"]: op_dict(row.asDict()) for row in rows}


def _problem(invoke: Column, follows_invoke: Column) -> Column:
    """Why a client event breaks invoke-then-completion alternation (a template), else null."""
    return (
        F.when(~invoke & ~follows_invoke, "completes an operation its process never invoked")
        .when(
            invoke & follows_invoke,
            "is invoked while its process's invocation at index {prev} is pending",
        )
        .when(
            ~invoke & (F.col("f") != F.col("prev.f")),
            "completes f {prev_f!r} invoked at index {prev} under another f",
        )
    )


def _first_malformed(path: Path, bad: int) -> str:
    """The sentence for the first malformed line; only runs when Spark found some."""
    for number, line, last in _numbered_lines(path):
        if not line.strip() or (last and has_partial_last_line(path) and not _is_json(line)):
            continue
        problem = _event_problem(line)
        if problem:
            others = bad - 1
            more = f" ({others} more malformed line{'s' * (others > 1)} after it)" if others else ""
            return (
                f"{path} line {number} is not a valid event ({problem}): "
                f"fix or remove that line{more}"
            )
    return f"{path} has {bad} lines that are not valid events"


def _duplicate_index(path: Path) -> str:
    """The sentence for the first index that two lines share."""
    seen: dict[int, int] = {}
    for number, line, _ in _numbered_lines(path):
        if not line.strip() or not _is_json(line):
            continue
        index = _parse(line).get("index")
        if index in seen:
            return (
                f"{path} lines {seen[index]} and {number} both have index {index}: "
                "each event needs its own index"
            )
        seen[index] = number
    return f"{path} has events that share an index"


def _event_problem(line: str) -> str | None:
    """What makes one line not an event, in words; None when it is one."""
    try:
        event = _parse(line)
    except ValueError:
        return "it is not JSON"
    if not isinstance(event, dict):
        return "it is not a JSON object"
    for key in ("index", "time"):
        if key not in event:
            return f"it has no {key}"
        value = event[key]
        if not isinstance(value, int) or isinstance(value, bool) or value not in INT64:
            return f"its {key} {json.dumps(value)} is not an integer"
    process = event.get("process")
    if not isinstance(process, (int, str)) or isinstance(process, bool):
        return f"its process {json.dumps(process)} is neither an integer nor a name"
    if event.get("type") not in EVENT_TYPES:
        return f"type {json.dumps(event.get('type'))} is not one of {', '.join(EVENT_TYPES)}"
    if not isinstance(event.get("f"), str):
        return f"its f {json.dumps(event.get('f'))} is not a string"
    if event.get("write") is not None and not isinstance(event["write"], bool):
        return f"its write {json.dumps(event['write'])} is neither true nor false"
    return None


def _numbered_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number from 1, text, is it the last line), decoded as Spark decodes it."""
    with path.open("rb") as f:
        previous: bytes | None = None
        number = 0
        for raw in f:
            if previous is not None:
                yield number, previous.decode(errors="replace"), False
            previous, number = raw.rstrip(b"\n"), number + 1
        if previous is not None:
            yield number, previous.decode(errors="replace"), True


def _last_line(path: Path) -> str:
    """The text after the file's last newline (read from the end: histories can be large)."""
    with path.open("rb") as f:
        end = f.seek(0, 2)
        chunk, position = b"", end
        while position > 0 and b"\n" not in chunk:
            step = min(65536, position)
            position -= step
            f.seek(position)
            chunk = f.read(step) + chunk
        return chunk.rsplit(b"\n", 1)[-1].decode(errors="replace")


def _parse(text: str) -> Any:
    """JSON as Spark's reader takes it: the first value on the line, whatever follows it."""
    return json.JSONDecoder().raw_decode(text.strip())[0]


def _is_json(text: str) -> bool:
    try:
        _parse(text)
    except ValueError:
        return False
    return True
