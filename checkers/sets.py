"""The set checker: acknowledged adds must stay visible to every read that begins later.

Each element is judged on its own, as in Jepsen's set-full. It becomes *known* when its add
completes ok or when the first read (in invocation order) that contains it completes, whichever is
earlier. A known element is exactly one of:

- lost: a read invoked after the last read containing it completed (after its add's completion if
  no read contains it) does not contain it. Invalid.
- stale: not lost, but some read invoked after it was known missed it. Allowed (reads may lag).
- never-read: its add was acknowledged, but no read began after it was known, so nothing says
  whether it survived. Allowed.
- stable: otherwise: no read invoked after it was known misses it.

Besides: an element in a read that was never added, or whose add failed, is unexpected (invalid);
an element a read lists twice is duplicated (invalid); an add with an unknown outcome (info) that
a read shows is recovered (allowed: it took effect). In the confirm/rollback mode, an unexpected
element whose add was told it was rolled back is instead a resurrected rollback when a read invoked
after that answer contains it, and a dirty read (a read of unconfirmed data) when only reads
invoked before it did (both invalid).

Reads grow with the set, so exploding every read into (read, element) rows would cost reads x
elements rows. Instead, reads are put in invocation order (their rank) and each is compared with
the previous one: only the elements that appear or disappear become rows, and each element's
presence is a few intervals of ranks. "How many reads began after time t" is a rank too, so each
question about an element becomes arithmetic on ranks, joins and aggregations.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.history_table import op_dicts
from checkers.rollback import CONFIRM_ROLLBACK, DIRTY, RESURRECTED, ROLLBACK
from harness.errors import BadInput
from harness.history import NEMESIS
from harness.verdict import Validity

ANOMALY_CAP = 50
INVALID_TYPES = (DIRTY, "duplicated", "lost", RESURRECTED, "unexpected")
ANOMALY_TYPES = (
    DIRTY,
    "duplicated",
    "lost",
    "never-read",
    "recovered",
    RESURRECTED,
    "stale",
    "unexpected",
)
_OK, _INFO, _FAIL = 0, 1, 2


def check(ops: DataFrame, mode: str | None = None) -> dict[str, Any]:
    """Check the set workload's adds and ok reads (and, in mode "confirm-rollback", that mode's
    contract)."""
    client = ops.filter(F.col("process") != NEMESIS)
    rollback = F.col("type") == "fail"
    rollback &= F.col("error").rlike(ROLLBACK) if mode == CONFIRM_ROLLBACK else F.lit(False)
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
    read_count, repeating = _validate(adds, steps)
    intervals = _intervals(steps).localCheckpoint()
    judged = _judge(_elements(adds, intervals, ranked), intervals, ranked, read_count)
    judged = judged.localCheckpoint()
    counts = _counts(judged)
    listed = _listed(judged, _duplicates(reads, repeating))

    anomaly_counts = {row["type"]: row["count"] for row in listed}
    ops_by_index = op_dicts(ops, [i for row in listed for i in _op_indices(row)])
    anomalies = [
        {
            "type": row["type"],
            "explanation": _explain(row),
            "ops": [ops_by_index[i] for i in _op_indices(row)],
        }
        for row in listed
    ]
    worst = next((row for row in listed if row["type"] == "stale"), None)
    valid: Validity = True if read_count else "unknown"
    if any(t in anomaly_counts for t in INVALID_TYPES):
        valid = False
    return {
        "valid": valid,
        "anomaly_types": sorted(anomaly_counts),
        "anomalies": anomalies,
        "anomaly_counts": anomaly_counts,
        **counts,
        **{f"{t.replace('-', '_')}_count": anomaly_counts.get(t, 0) for t in ANOMALY_TYPES},
        "read_count": read_count,
        "worst_stale": None
        if worst is None
        else {
            "element": worst["element"],
            "staleness_ms": worst["staleness"] / 1e6,
            "read_index": worst["proof_read"],
        },
    }


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


def _validate(adds: DataFrame, steps: DataFrame) -> tuple[int, list[int]]:
    """BadInput for a value not of the set workload's shape; else the ok read count, and the
    reads that list some element twice (rare, so only those are exploded later)."""
    bad_add = adds.agg(F.min(F.when(F.col("element").isNull(), F.col("invoke_index")))).first()
    if bad_add is not None and bad_add[0] is not None:
        raise BadInput(
            f"the set add at history index {bad_add[0]} has a value that is not an integer"
        )
    read_count, bad_read, repeating = steps.agg(
        F.count("read"),
        F.min(F.when(F.col("malformed"), F.col("read"))),
        F.collect_list(F.when(F.col("repeats"), F.col("read"))),
    ).collect()[0]
    if bad_read is not None:
        raise BadInput(
            f"the set read at history index {bad_read} returned a value that is not a "
            "list of integers"
        )
    return read_count, repeating


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
    outcome = (
        F.when(F.col("type") == "ok", _OK).when(F.col("type") == "fail", _FAIL).otherwise(_INFO)
    )
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
    failed = F.col("add.outcome") == _FAIL
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


def _judge(
    elements: DataFrame, intervals: DataFrame, ranked: DataFrame, read_count: int
) -> DataFrame:
    """Classify every element, with the read that proves a lost or stale one."""
    unexpected = F.col("first_read").isNotNull() & (
        F.col("outcome").isNull() | (F.col("outcome") == _FAIL)
    )
    elements = elements.select(
        "*",
        unexpected.alias("unexpected"),
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
    known = F.col("known_time").isNotNull()
    after_known = read_count - F.col("by_known")
    lost = known & (F.col("by_last") < read_count)
    missed = after_known - F.coalesce("present_after", F.lit(0))
    status = (
        F.when(F.col("unexpected") | ~known, None)
        .when(lost, "lost")
        .when(missed > 0, "stale")
        .when((after_known == 0) & (F.col("outcome") == _OK), "never-read")
        .otherwise("stable")
    )
    # Lost: the first read begun after it was last seen. Stale: the latest read that missed it,
    # the last read if the last present one is not last, else the one just before the final run.
    proof_rank = F.when(lost, F.col("by_last") + 1).when(
        missed > 0,
        F.when(F.col("last_rank") < read_count, read_count).otherwise(F.col("top_start") - 1),
    )
    judged = (
        elements.join(begun, "element", "left")
        .join(present_after, "element", "left")
        .select(
            "*",
            status.alias("status"),
            (read_count - F.col("by_last")).alias("reads_after_last"),
            missed.alias("missed"),
            proof_rank.alias("proof_rank"),
        )
    )
    proof = ranked.select(
        F.col("rank").alias("proof_rank"),
        F.col("read").alias("proof_read"),
        F.col("inv").alias("proof_time"),
    )
    return judged.join(proof, "proof_rank", "left").withColumn(
        "staleness",
        F.when(F.col("status") == "stale", F.col("proof_time") - F.col("known_time")),
    )


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


def _duplicates(reads: DataFrame, repeating: list[int]) -> DataFrame | None:
    """(read, element, copies) for elements a read lists more than once, if any read does."""
    if not repeating:
        return None
    return (
        reads.filter(F.col("read").isin(repeating))
        .select("read", F.explode("elements").alias("element"))
        .groupBy("read", "element")
        .agg(F.count("*").alias("copies"))
        .filter(F.col("copies") > 1)
    )


def _counts(judged: DataFrame) -> dict[str, int]:
    """How many elements were attempted, acknowledged, known and stable, and how many of the
    lost ones had an acknowledged add (the others were known only from a read)."""
    acknowledged = F.col("outcome") == _OK
    row = judged.agg(
        F.count("outcome").alias("attempt_count"),
        F.count(F.when(acknowledged, 1)).alias("ok_add_count"),
        F.count("status").alias("known_count"),
        F.count(F.when(F.col("status") == "stable", 1)).alias("stable_count"),
        F.count(F.when(acknowledged & (F.col("status") == "lost"), 1)).alias(
            "lost_acknowledged_count"
        ),
    ).collect()[0]
    return row.asDict()


def _listed(judged: DataFrame, duplicates: DataFrame | None) -> list[Any]:
    """Up to ANOMALY_CAP rows per anomaly type (worst staleness first), each with its type count."""
    columns = [
        "element",
        "add_op",
        "rollback_error",
        "rollback_time",
        "outcome",
        "add_ok_time",
        "known_time",
        "first_read",
        "first_seen_time",
        "last_read",
        "last_seen_time",
        "reads_after_last",
        "missed",
        "staleness",
        "proof_time",
    ]
    shown_by_first_read = F.col("first_read").alias("proof_read")
    rolled_back = F.col("rollback_error").isNotNull()
    # seen by a read begun after the client was told of the rollback, or only by earlier ones
    resurrected = rolled_back & (F.col("last_read_invoked") > F.col("rollback_time"))
    dirty = rolled_back & ~resurrected
    kinds = {
        "lost": (F.col("status") == "lost", F.col("proof_read")),
        "stale": (F.col("status") == "stale", F.col("proof_read")),
        "never-read": (F.col("status") == "never-read", F.lit(None).cast("bigint")),
        "recovered": ((F.col("outcome") == _INFO) & F.col("first_read").isNotNull(), None),
        RESURRECTED: (F.col("unexpected") & resurrected, F.col("last_read")),
        DIRTY: (F.col("unexpected") & dirty, None),
        "unexpected": (F.col("unexpected") & ~rolled_back, None),
    }
    parts = [
        judged.filter(condition).select(
            F.lit(kind).alias("type"),
            *columns,
            shown_by_first_read if proof is None else proof.alias("proof_read"),
            F.lit(None).cast("bigint").alias("copies"),
        )
        for kind, (condition, proof) in kinds.items()
    ]
    if duplicates is not None:
        parts.append(
            duplicates.select(
                F.lit("duplicated").alias("type"),
                "element",
                *[F.lit(None).alias(c) for c in columns[1:]],
                F.col("read").alias("proof_read"),
                "copies",
            )
        )
    anomalies = parts[0]
    for part in parts[1:]:
        anomalies = anomalies.unionByName(part)
    of_type = Window.partitionBy("type")
    return (
        anomalies.select(
            "*",
            F.row_number()
            .over(of_type.orderBy(F.col("staleness").desc_nulls_last(), "element", "proof_read"))
            .alias("n"),
            F.count("*").over(of_type).alias("count"),
        )
        .filter(F.col("n") <= ANOMALY_CAP)
        .orderBy("type", "n")
        .collect()
    )


def _op_indices(row: Any) -> list[int]:
    """The operations an anomaly names: the add, and the reads that show it."""
    wanted = [row["add_op"], row["proof_read"]]
    if row["type"] == "lost":
        wanted.insert(1, row["last_read"])
    return [i for i in wanted if i is not None]


def _explain(row: Any) -> str:
    """One sentence a person can check against the history, for one anomalous element."""
    e, kind = row["element"], row["type"]
    add = f"add at index {row['add_op']}"
    if kind == "duplicated":
        return f"the read at index {row['proof_read']} lists element {e} {row['copies']} times"
    if kind == RESURRECTED:
        return (
            f"element {e}: its {add} was told it was rolled back ({row['rollback_error']}), yet "
            f"the read at index {row['proof_read']}, invoked after that, contains it: a "
            "rolled-back write became visible"
        )
    if kind == DIRTY:
        return (
            f"element {e}: the read at index {row['proof_read']} contains it while its {add} "
            f"waited for the quorum; the add was then told it was rolled back "
            f"({row['rollback_error']}, at {_s(row['rollback_time'])}) and no read begun after "
            "that contains it: the read saw a write that was never confirmed"
        )
    if kind == "unexpected":
        why = "which no operation ever added" if row["add_op"] is None else f"whose {add} failed"
        return f"the read at index {row['proof_read']} contains element {e}, {why}"
    if kind == "recovered":
        return (
            f"element {e}: its {add} had an unknown outcome (info), and the read at index "
            f"{row['proof_read']} contains it, so the add took effect"
        )
    if kind == "never-read":
        return (
            f"element {e} was known from {_s(row['known_time'])} ({_how_known(row)}), "
            "but no read began after that, so nothing shows whether it survived"
        )
    if kind == "stale":
        return (
            f"element {e} was known from {_s(row['known_time'])} ({_how_known(row)}), yet the "
            f"read at index {row['proof_read']}, invoked at {_s(row['proof_time'])} "
            f"({row['staleness'] / 1e6:.1f} ms later), does not contain it "
            f"({row['missed']} reads begun after it was known missed it; later reads have it)"
        )
    if row["last_read"] is None:
        seen = "no read ever contained it"
    else:
        seen = (
            f"the read at index {row['last_read']} (completed at {_s(row['last_seen_time'])}) "
            "was the last to contain it"
        )
    later = row["reads_after_last"] - 1
    missing = {0: "does", 1: "and 1 later read do"}.get(later, f"and {later} later reads do")
    return (
        f"element {e} was lost: {_how_known(row)}, {seen}, yet the read at index "
        f"{row['proof_read']} (invoked at {_s(row['proof_time'])}) {missing} not contain it"
    )


def _how_known(row: Any) -> str:
    """Why the element counts as known: its acknowledged add, or an earlier read that had it."""
    if row["add_ok_time"] is not None and row["add_ok_time"] == row["known_time"]:
        return f"its add at index {row['add_op']} was acknowledged at {_s(row['add_ok_time'])}"
    return (
        f"the read at index {row['first_read']} had it at {_s(row['first_seen_time'])}, "
        f"its add at index {row['add_op']} being {'ok' if row['outcome'] == _OK else 'unknown'}"
    )


def _s(ns: int) -> str:
    """A history time (ns since the run started) in seconds, as reports show it."""
    return f"{ns / 1e9:.3f} s"
