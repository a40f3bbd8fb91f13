"""The set checker fed from the operations table: the facts of every element found by Spark jobs,
judged by checkers/sets.py.

Reads grow with the set, so exploding every read into (read, element) rows would cost reads x
elements rows. Instead, reads are put in invocation order (their rank) and each is compared with
the previous one: only the elements that appear or disappear become rows, and each element's
presence is a few intervals of ranks. "How many reads began after time t" is a rank too, so each
fact about an element becomes arithmetic on ranks, joins and aggregations.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers import sets
from checkers.rollback import ROLLBACK
from checkers.sets import FAIL, INFO, OK
from checkers.spark.history_table import op_dicts
from core.contract import Contract
from core.errors import BadInput
from core.history import NEMESIS


def check(ops: DataFrame, contract: Contract = Contract.DURABLE) -> dict[str, Any]:
    """As `checkers.sets.check`, over the operations table."""
    client = ops.filter(F.col("process") != NEMESIS)
    rollback = F.col("type") == "fail"
    rollback &= (
        F.col("error").rlike(ROLLBACK) if contract == Contract.CONFIRM_ROLLBACK else F.lit(False)
    )
    adds = client.filter(F.col("f") == "add").select(
        F.expr("try_cast(invoke_value AS bigint)").alias("element"),
        "type",
        "invoke_index",
        "complete_time",
        F.when(rollback, F.struct("invoke_index", "error", "complete_time")).alias("rollback"),
    )
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
    repeating = _validate(adds, steps)
    intervals = _intervals(steps).localCheckpoint()
    elements = _facts(_elements(adds, intervals, ranked), intervals, ranked)
    order = ranked.orderBy("rank").select("read", "inv").toArrow()
    return sets.judge(
        elements.select(*sets.FACTS).toArrow().to_pylist(),
        order.column("read").to_pylist(),
        order.column("inv").to_pylist(),
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


def _elements(adds: DataFrame, intervals: DataFrame, ranked: DataFrame) -> DataFrame:
    """One row per element added or read: its add's outcome and the reads that first/last saw it."""
    outcome = F.when(F.col("type") == "ok", OK).when(F.col("type") == "fail", FAIL).otherwise(INFO)
    added = adds.groupBy("element").agg(
        F.min(F.when(F.col("type") == "ok", F.col("complete_time"))).alias("add_ok_time"),
        # The add an explanation names: an ok one if any, else an unknown one, else a failed one.
        F.min(F.struct(outcome.alias("outcome"), F.col("invoke_index").alias("op"))).alias("add"),
        # In the confirm/rollback mode: the first add told it was rolled back.
        F.min("rollback").alias("rollback"),
    )
    spans = intervals.groupBy("element").agg(
        F.min("start").alias("first_rank"),
        F.max("stop").alias("last_rank"),
        F.max(F.struct("stop", "start")).getField("start").alias("top_start"),
    )
    first = ranked.select(
        F.col("rank").alias("first_rank"),
        F.col("read").alias("first_read"),
        F.col("comp").alias("first_seen_time"),
    )
    last = ranked.select(
        F.col("rank").alias("last_rank"),
        F.col("read").alias("last_read"),
        F.col("inv").alias("last_read_invoked"),
        F.col("comp").alias("last_seen_time"),
    )
    seen = spans.join(first, "first_rank").join(last, "last_rank")
    failed = F.col("add.outcome") == FAIL
    return added.join(seen, "element", "full").select(
        "element",
        "add_ok_time",
        F.col("add.outcome").alias("outcome"),
        # Every add of an element that failed: the one a resurrected rollback names, if any.
        F.when(failed, F.coalesce("rollback.invoke_index", "add.op"))
        .otherwise(F.col("add.op"))
        .alias("add_op"),
        F.when(failed, F.col("rollback.error")).alias("rollback_error"),
        F.when(failed, F.col("rollback.complete_time")).alias("rollback_time"),
        "last_read_invoked",
        "first_read",
        "first_seen_time",
        "last_read",
        "last_seen_time",
        "last_rank",
        "top_start",
    )


def _facts(elements: DataFrame, intervals: DataFrame, ranked: DataFrame) -> DataFrame:
    """Every element with its facts (checkers/sets.py's FACTS): how many reads began by the
    time it was known and by its last sighting, and how many begun after it was known have it
    (`known_time` and `last_time` as checkers/sets.py defines them)."""
    unexpected = F.col("first_read").isNotNull() & (
        F.col("outcome").isNull() | (F.col("outcome") == FAIL)
    )
    elements = elements.select(
        "*",
        F.when(~unexpected, F.least("add_ok_time", "first_seen_time")).alias("known_time"),
        F.coalesce("last_seen_time", "add_ok_time").alias("last_time"),
    )
    begun = _reads_begun_by(ranked, elements)
    # Ranks above `by_known` are exactly the reads invoked after the element was known.
    present_after = (
        intervals.join(begun.select("element", "by_known"), "element")
        .groupBy("element")
        .agg(
            F.sum(
                F.greatest(
                    F.lit(0), F.col("stop") - F.greatest(F.col("start") - 1, F.col("by_known"))
                )
            ).alias("present_after")
        )
    )
    return elements.join(begun, "element", "left").join(present_after, "element", "left")


def _reads_begun_by(ranked: DataFrame, elements: DataFrame) -> DataFrame:
    """(element, by_known, by_last): how many reads were invoked at or before each time."""
    known = elements.filter(F.col("known_time").isNotNull())
    points = (
        ranked.select(
            F.col("inv").alias("t"), F.lit("read").alias("kind"), F.col("read").alias("key")
        )
        .unionByName(
            known.select(
                F.col("known_time").alias("t"),
                F.lit("known").alias("kind"),
                F.col("element").alias("key"),
            )
        )
        .unionByName(
            known.select(
                F.col("last_time").alias("t"),
                F.lit("last").alias("kind"),
                F.col("element").alias("key"),
            )
        )
    )
    # At the same instant reads sort first: a read invoked exactly then has begun by then.
    so_far = Window.orderBy("t", F.col("kind") != "read", "key").rowsBetween(
        Window.unboundedPreceding, Window.currentRow
    )
    counted = points.select(
        "kind", "key", F.sum((F.col("kind") == "read").cast("int")).over(so_far).alias("n")
    )
    return (
        counted.filter(F.col("kind") != "read")
        .groupBy(F.col("key").alias("element"))
        .agg(
            F.max(F.when(F.col("kind") == "known", F.col("n"))).alias("by_known"),
            F.max(F.when(F.col("kind") == "last", F.col("n"))).alias("by_last"),
        )
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
