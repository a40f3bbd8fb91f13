"""The history as Spark tables: validated events, and operations (invocations with completions).

Checkers work on the operations table. Values stay JSON text in both tables (Parquet-friendly, and
each checker parses the shape it expects); `op_dicts` turns operations back into plain dicts with
parsed values for the anomalies that checkers report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from harness.errors import BadInput
from harness.history import EVENT_TYPES, NEMESIS, has_partial_last_line

# The raw line is parsed once; process, f and value stay variants so that their JSON types can be
# checked (a StringType column would turn 3, "3" and [3] all into text).
_EVENT_SCHEMA = (
    "index bigint, time bigint, process variant, type string, f variant, value variant, "
    "node string, error string, workload string"
)
_INT64 = range(-(2**63), 2**63)
PARTIAL_LINE_NOTE = "the last line was cut off by a crash and was skipped"

OP_COLUMNS = (
    "process",
    "workload",
    "f",
    "node",
    "type",
    "invoke_index",
    "invoke_time",
    "complete_index",
    "complete_time",
    "invoke_value",
    "value",
    "error",
    "latency_ns",
)


def load_events(spark: SparkSession, path: Path) -> tuple[DataFrame, list[str]]:
    """The history's events, validated, with notes about what was skipped.

    Columns: index, time, process (text: a number or "nemesis"), type, f, value (JSON text),
    node, error, workload. Blank lines are ignored. A malformed line is a BadInput naming it, except
    an unparseable last line with no newline after it: a crash cut it off, so it is skipped.
    """
    if not path.is_file():
        raise BadInput(f"history file {path} does not exist")
    skip_last = has_partial_last_line(path) and not _is_json(_last_line(path))
    lines = spark.read.option("lineSep", "\n").text(str(path))
    parsed = lines.filter(F.trim("value") != "").select(
        F.from_json("value", _EVENT_SCHEMA, {"allowSingleQuotes": "false"}).alias("e")
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
    # Parsed once and kept: validation, counting and pairing all read it.
    checked = parsed.select(
        good.alias("good"),
        F.col("e.index").alias("index"),
        F.col("e.time").alias("time"),
        F.expr("variant_get(e.process, '$', 'string')").alias("process"),
        F.col("e.type").alias("type"),
        F.expr("variant_get(e.f, '$', 'string')").alias("f"),
        F.coalesce(F.to_json("e.value"), F.lit("null")).alias("value"),
        F.col("e.node").alias("node"),
        F.col("e.error").alias("error"),
        F.col("e.workload").alias("workload"),
    ).localCheckpoint()
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
    by_process = Window.partitionBy("process").orderBy("index")
    outcome = ("index", "time", "type", "value", "node", "error", "workload")
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
    # Kept: the problem check and every checker read it; pairing moves the largest values.
    rows = (
        paired.filter(invoke | (nemesis & ~follows_invoke) | problem.isNotNull())
        .select(
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
        )
        .localCheckpoint()
    )
    first = rows.filter(F.col("problem").isNotNull()).orderBy("invoke_index").first()
    if first is not None:
        what = first["problem"].format(prev=first["prev_index"], prev_f=first["prev_f"])
        raise BadInput(
            f"history event index {first['invoke_index']} (process {first['process']}, "
            f"{first['event_type']} {first['f']!r}) {what}: every operation is an invoke "
            "followed by its completion on the same process"
        )
    return rows.filter(F.col("problem").isNull()).select(*OP_COLUMNS)


def op_dicts(ops: DataFrame, indices: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The operations with these invoke indices as dicts, values parsed: for anomaly reports."""
    wanted = sorted(set(indices))
    if not wanted:
        return {}
    rows = ops.filter(F.col("invoke_index").isin(wanted)).select(*OP_COLUMNS).collect()
    return {row["invoke_index"]: op_dict(row.asDict()) for row in rows}


def op_dict(row: dict[str, Any]) -> dict[str, Any]:
    """One operation as plain data: JSON values parsed, numeric processes back to int."""
    op = dict(row)
    for key in ("invoke_value", "value"):
        op[key] = None if op[key] is None else json.loads(op[key])
    op["process"] = process_value(op["process"])
    return op


def process_value(process: str) -> int | str:
    """A process as the history wrote it: the table holds text, since "nemesis" is one too."""
    return int(process) if process.lstrip("-").isdigit() else process


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
        if not isinstance(value, int) or isinstance(value, bool) or value not in _INT64:
            return f"its {key} {json.dumps(value)} is not an integer"
    process = event.get("process")
    if not isinstance(process, (int, str)) or isinstance(process, bool):
        return f"its process {json.dumps(process)} is neither an integer nor a name"
    if event.get("type") not in EVENT_TYPES:
        return f"type {json.dumps(event.get('type'))} is not one of {', '.join(EVENT_TYPES)}"
    if not isinstance(event.get("f"), str):
        return f"its f {json.dumps(event.get('f'))} is not a string"
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
