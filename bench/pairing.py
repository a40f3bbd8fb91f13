"""How long `harness check` takes to turn a list-append history into its operations table.

The stage every check starts with: load the JSONL history into Spark and validate it, pair each
invocation with its completion, and write `ops.parquet`, as `store_operations` (what
`checkers/spark/pipeline.py` calls) does it. `stage s` is that stage as the pipeline runs it, and
`cpu s` the Spark JVM's CPU time for it (the machine may be shared: other work shows as wall time
above cpu / cores). Since the stage runs as one Spark job, its steps are then timed again, each as
the extra cost over the step before: load+validate is the fast path's parsed and checked events
run to a no-op sink, pair is the same with the pairing on top, and write is the rest of another
run of the stage (the Parquet, the duplicate-index check on the driver, the rename).

Histories are synthetic append histories of 100k and 1M transactions (two events each) from
`bench/listappend_scale.py`'s generator, or the given files. A tiny history is checked first, so
that starting Spark is not counted, but the first run in a fresh JVM still pays for the JIT's
warm-up: that is what a `harness check` pays.

    .venv/bin/python bench/pairing.py [--sizes 100k,1M] [--history FILE …] [--repeat 1]
        [--master local[*]] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import Observation, SparkSession

from checkers.spark.history_table import _fast_checked, _lines, _paired, store_operations
from checkers.spark.pipeline import OPS_TABLE
from checkers.spark.session import get_spark
from workloads.base import WorkloadOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from listappend_scale import generate, parse_size, show_size, write_history


def jvm_cpu(spark: SparkSession) -> float:
    """CPU seconds the Spark JVM (local mode: driver and executors) has used so far."""
    stat = Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def stages(spark: SparkSession, history: Path, out: Path) -> tuple[float, ...]:
    """(stage s, JVM cpu s, load+validate s, pair s, write s, events) for one history."""
    table = out / OPS_TABLE
    cpu = jvm_cpu(spark)
    counted: list[int] = []
    stage = timed(lambda: counted.append(store_operations(spark, history, table)[0]))
    cpu = jvm_cpu(spark) - cpu
    events = _fast_checked(_lines(spark, history))
    load = timed(lambda: events.write.format("noop").mode("overwrite").save())
    paired = _paired(_fast_checked(_lines(spark, history)), Observation())
    pair = timed(lambda: paired.write.format("noop").mode("overwrite").save())
    total = timed(lambda: store_operations(spark, history, table))
    return stage, cpu, load, pair - load, total - pair, counted[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k,1M", help="transactions, comma-separated")
    parser.add_argument("--history", type=Path, action="append", help="time this file instead")
    parser.add_argument("--repeat", type=int, default=1, help="runs per history")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--tmp", type=Path, default=None, help="where histories are written")
    args = parser.parse_args()

    spark = get_spark(args.master)
    print(f"Spark {spark.version} on {spark.sparkContext.master}, {os.cpu_count()} CPUs")
    head = ("history", "MB", "run", "stage s", "cpu s", "load s", "pair s", "write s", "events")
    print("{:>12} {:>5} {:>3} {:>7} {:>6} {:>7} {:>7} {:>7} {:>8}".format(*head))
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        runs = [("warm-up", None, 1_000)]
        if args.history:
            runs += [(h.name, h, 0) for h in args.history]
        else:
            runs += [(show_size(n), None, n) for n in map(parse_size, args.sizes.split(","))]
        for name, history, n in runs:
            if history is None:
                history = Path(tmp) / "history.jsonl"
                write_history(generate(n, 10, WorkloadOptions(), 1, 0.05, 0.002, True), history)
            for run in range(1 if name == "warm-up" else args.repeat):
                figures = stages(spark, history, Path(tmp) / "out")
                if name != "warm-up":
                    mb = history.stat().st_size / 1e6
                    print(
                        f"{name:>12} {mb:>5.0f} {run + 1:>3} "
                        "{:>7.2f} {:>6.1f} {:>7.2f} {:>7.2f} {:>7.2f} {:>8}".format(*figures),
                        flush=True,
                    )


if __name__ == "__main__":
    main()
