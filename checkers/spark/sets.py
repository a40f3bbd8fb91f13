"""The set checker fed from the operations table: the runs of read ranks that have each element
found by Spark jobs, judged by checkers/sets.py (its `facts` and `judge`).

Reads grow with the set, so exploding every read into (read, element) rows would cost reads x
elements rows. Instead, reads are put in invocation order (their rank) and each is compared with
the previous one: only the elements that appear or disappear become rows, and each element's
presence is a few runs of ranks, which the driver collects with the adds and the reads' order.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers import sets
from checkers.operations import op_dict
from checkers.spark.history_table import op_dicts
from core.contract import Contract
from core.errors import BadInput
from core.history import NEMESIS, OP_COLUMNS


def check(ops: DataFrame, contract: Contract = Contract.DURABLE) -> dict[str, Any]:
    """As `checkers.sets.check`, over the operations table."""
    client = ops.filter(F.col("process") != NEMESIS)
    adds = client.filter(F.col("f") == "add")
    reads = client.filter((F.col("f") == "read") & (F.col("type") == "ok")).select(
        F.col("invoke_index").alias("read"),
        F.col("invoke_time").alias("inv"),
        F.col("complete_time").alias("comp"),
        F.from_json("value", "array<bigint>").alias("elements"),
    )
    # Each table below is used several times: checkpoints keep Spark from recomputing it (reads
    # are parsed once) and keep plans small (planning dominates on small histories).
    ranked = reads.select(
        "read", "inv", "comp", F.row_number().over(Window.orderBy("inv", "read")).alias("rank")
    ).localCheckpoint()
    steps = _steps(reads, ranked).localCheckpoint()
    elements = adds.select(
        F.expr("try_cast(invoke_value AS bigint)").alias("element"), "invoke_index"
    )
    repeating = _validate(elements, steps)
    runs: dict[int, list[tuple[int, int]]] = {}
    for row in _intervals(steps).toArrow().to_pylist():
        runs.setdefault(row["element"], []).append((row["start"], row["stop"]))
    order = ranked.orderBy("rank").select("read", "inv", "comp").toArrow()
    read = sets.Ranked(*(order.column(c).to_pylist() for c in ("read", "inv", "comp")))
    added = [op_dict(row) for row in adds.select(*OP_COLUMNS).toArrow().to_pylist()]
    return sets.judge(
        sets.facts(added, runs, read, contract),
        read.index,
        read.invoked,
        _duplicates(reads, repeating),
        lambda indices: op_dicts(ops, indices),
    )


def _steps(reads: DataFrame, ranked: DataFrame) -> DataFrame:
    """Each ok read (and one empty read after the last) with its flips and what is wrong with it.

    A flip (element, rank, end) says an element's run of consecutive present ranks starts (end
    0) or stops (end 1) at that rank: it starts where a read has it and the previous read does
    not, and stops a rank earlier where the previous read has it and this one does not. Healthy
    reads differ from their predecessor by a few elements, so flips stay few while reads grow
    with the set. Pairing each read with its predecessor is a join, so it spreads over executors.
    """
    now = reads.join(F.broadcast(ranked.select("read", "rank")), "read").select(
        "rank", "read", "elements"
    )
    before = now.select((F.col("rank") + 1).alias("rank"), F.col("elements").alias("before"))
    empty = F.array().cast("array<bigint>")
    elements, prior = F.coalesce("elements", empty), F.coalesce("before", empty)
    rank, is_read = F.col("rank"), F.col("read").isNotNull()

    def flip(items: Column, at: Column, end: int) -> Column:
        return F.transform(
            items,
            lambda e: F.struct(e.alias("element"), at.alias("rank"), F.lit(end).alias("end")),
        )

    return now.join(before, "rank", "full").select(
        "read",
        (is_read & (F.col("elements").isNull() | F.exists("elements", lambda e: e.isNull()))).alias(
            "malformed"
        ),
        (is_read & (F.size(elements) != F.size(F.array_distinct(elements)))).alias("repeats"),
        F.concat(
            flip(F.array_except(elements, prior), rank, 0),
            flip(F.array_except(prior, elements), rank - 1, 1),
        ).alias("flips"),
    )


def _validate(adds: DataFrame, steps: DataFrame) -> list[int]:
    """BadInput for a value not of the set workload's shape; else the reads that list some
    element twice (rare, so only those are exploded later)."""
    bad_add = adds.agg(F.min(F.when(F.col("element").isNull(), F.col("invoke_index")))).first()
    if bad_add is not None and bad_add[0] is not None:
        raise BadInput(
            f"the set add at history index {bad_add[0]} has a value that is not an integer"
        )
    bad_read, repeating = steps.agg(
        F.min(F.when(F.col("malformed"), F.col("read"))),
        F.collect_list(F.when(F.col("repeats"), F.col("read"))),
    ).collect()[0]
    if bad_read is not None:
        raise BadInput(
            f"the set read at history index {bad_read} returned a value that is not a "
            "list of integers"
        )
    return repeating


def _intervals(steps: DataFrame) -> DataFrame:
    """(element, start, stop): each run of consecutive read ranks whose reads have the element."""
    flips = steps.select(F.explode("flips").alias("flip")).select("flip.*")
    # Starts and stops alternate per element; a one-read run starts and stops at the same rank,
    # start first.
    following = Window.partitionBy("element").orderBy("rank", "end")
    return (
        flips.select("element", "rank", "end", F.lead("rank").over(following).alias("stop"))
        .filter(F.col("end") == 0)
        .select("element", F.col("rank").alias("start"), "stop")
    )


def _duplicates(reads: DataFrame, repeating: list[int]) -> list[dict[str, int]]:
    """(read, element, copies) for elements a read lists more than once."""
    if not repeating:
        return []
    rows = (
        reads.filter(F.col("read").isin(repeating))
        .select("read", F.explode("elements").alias("element"))
        .groupBy("read", "element")
        .agg(F.count("*").alias("copies"))
        .filter(F.col("copies") > 1)
        .orderBy("read", "element")
        .collect()
    )
    return [row.asDict() for row in rows]
