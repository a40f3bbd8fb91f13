"""The bank checker: every committed read must see all the money, in the right accounts.

Transfers move money between a fixed set of accounts and never create or destroy it, so under
snapshot isolation or stronger each ok read sees balances for exactly those accounts, none
negative, summing to the total. Each read is checked on its own, as a Spark job over all reads.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from checkers.history_table import op_dicts
from harness.errors import BadInput
from harness.history import NEMESIS
from harness.verdict import Validity

ANOMALY_CAP = 50


def check(ops: DataFrame, accounts: list[int], total: int) -> dict[str, Any]:
    """Check every ok read of the bank workload against the accounts and the total."""
    if not accounts:
        raise BadInput("the bank checker needs the list of accounts, and it is empty")
    names = F.array(*[F.lit(str(a)) for a in accounts])
    balances = F.col("balances")
    reads = (
        ops.filter((F.col("process") != NEMESIS) & (F.col("f") == "read") & (F.col("type") == "ok"))
        .select("invoke_index", F.from_json("value", "map<string,bigint>").alias("balances"))
        .select(
            "invoke_index",
            balances,
            F.array_sort(F.array_except(F.map_keys(balances), names)).alias("unexpected"),
            F.array_except(names, F.map_keys(balances)).alias("absent"),
            F.array_sort(F.map_keys(F.map_filter(balances, lambda _, v: v.isNull()))).alias("nil"),
            F.map_filter(balances, lambda _, v: v < 0).alias("negative"),
            F.aggregate(
                F.map_values(balances),
                F.lit(0).cast("decimal(38,0)"),
                lambda acc, v: acc + F.coalesce(v, F.lit(0)),
            ).alias("sum"),
        )
    )
    flags = {
        "nil-balance": (F.size("absent") > 0) | (F.size("nil") > 0),
        "negative-value": F.size("negative") > 0,
        "unexpected-key": F.size("unexpected") > 0,
        # A sum over missing balances says nothing: wrong-total only when every account is there.
        "wrong-total": (F.size("absent") == 0) & (F.size("nil") == 0) & (F.col("sum") != total),
    }
    flagged = reads.withColumn(
        "types",
        F.filter(F.array(*[F.when(c, t) for t, c in flags.items()]), lambda t: t.isNotNull()),
    )
    summary = flagged.agg(
        F.count("*").alias("reads"),
        F.min(F.when(balances.isNull(), F.col("invoke_index"))).alias("malformed"),
        F.min(F.when(F.size("types") > 0, F.col("invoke_index"))).alias("first_bad"),
        F.max(F.when(F.size("types") > 0, F.col("invoke_index"))).alias("last_bad"),
        F.count(F.when(F.size("types") > 0, 1)).alias("bad"),
    ).collect()[0]
    if summary["malformed"] is not None:
        raise BadInput(
            f"the bank read at history index {summary['malformed']} returned a value that is not "
            'a map of account to integer balance ({"0": 10, "1": 7, ...})'
        )

    listed = _listed(flagged) if summary["bad"] else []
    counts = {row["type"]: row["count"] for row in listed}
    bad_ends = [i for i in (summary["first_bad"], summary["last_bad"]) if i is not None]
    ops_by_index = op_dicts(ops, [row["invoke_index"] for row in listed] + bad_ends)
    anomalies = [
        {
            "type": row["type"],
            "explanation": _explain(row, accounts, total),
            "ops": [ops_by_index[row["invoke_index"]]],
        }
        for row in listed
    ]
    valid: Validity = True if summary["reads"] else "unknown"
    return {
        "valid": False if counts else valid,
        "anomaly_types": sorted(counts),
        "anomalies": anomalies,
        "anomaly_counts": counts,
        "read_count": summary["reads"],
        "bad_read_count": summary["bad"],
        "first_bad_read": ops_by_index.get(summary["first_bad"]),
        "last_bad_read": ops_by_index.get(summary["last_bad"]),
        "accounts": accounts,
        "total": total,
    }


def _listed(flagged: DataFrame) -> list[Any]:
    """The first ANOMALY_CAP bad reads of each type, each with the count of its type."""
    of_type = Window.partitionBy("type")
    return (
        flagged.select("*", F.explode("types").alias("type"))
        .select(
            "*",
            F.row_number().over(of_type.orderBy("invoke_index")).alias("n"),
            F.count("*").over(of_type).alias("count"),
        )
        .filter(F.col("n") <= ANOMALY_CAP)
        .orderBy("type", "invoke_index")
        .collect()
    )


def _explain(row: Any, accounts: list[int], total: int) -> str:
    """One sentence about one bad read, naming the read and the balances that are wrong."""
    read = f"the read at index {row['invoke_index']}"
    kind = row["type"]
    if kind == "wrong-total":
        seen = json.dumps(row["balances"], separators=(", ", ": "))
        return f"{read} saw balances summing to {int(row['sum'])} instead of {total}: {seen}"
    if kind == "negative-value":
        return f"{read} saw negative balances {json.dumps(row['negative'])}"
    if kind == "unexpected-key":
        return f"{read} saw accounts {_names(row['unexpected'])}, which are not among {accounts}"
    parts = []
    if row["absent"]:
        parts.append(f"no balance at all for accounts {_names(row['absent'])}")
    if row["nil"]:
        parts.append(f"a null balance for accounts {_names(row['nil'])}")
    return f"{read} has {' and '.join(parts)}"


def _names(keys: list[str]) -> str:
    """Account names in numeric order where they are numbers ("2" before "10")."""
    return ", ".join(sorted(keys, key=lambda k: (not k.lstrip("-").isdigit(), len(k), k)))
