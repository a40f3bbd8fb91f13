"""How fast the index of runs is built and served: stores of 10, 100 and 500 runs.

Each store holds copies of one real checked run (a set history checked in this process, so its
results.json is the pipeline's own), every tenth one invalid. For each size the Spark job of
checkers/spark/runs_index.py is timed cold (its first job in the session) and warm, then `harness
serve`'s start (which builds its index) and two page loads of the index (each re-reads only the
runs whose files changed: none here).

    .venv/bin/python bench/runs_index.py [--sizes 10,100,500] [--spark-master local[2]]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkers.spark.runs_index import build_index, find_runs
from checkers.spark.session import get_spark
from harness.serve import make_server
from tests.runs_store import check, make_run


def store_of(root: Path, size: int, valid: Path, invalid: Path) -> Path:
    store = root / f"store-{size}"
    for n in range(size):
        source = invalid if n % 10 == 9 else valid
        run = (
            store
            / f"single-set-none-{n % 7}"
            / f"20261121T{n // 3600:02d}{n // 60 % 60:02d}{n % 60:02d}"
        )
        shutil.copytree(source, run, ignore=shutil.ignore_patterns("report.html", "ops.parquet"))
    return store


def load(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as response:
        response.read()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,500")
    parser.add_argument("--spark-master", default="local[2]")
    args = parser.parse_args()
    started = time.perf_counter()
    spark = get_spark(args.spark_master)
    print(f"Spark session: {time.perf_counter() - started:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        valid = make_run(root / "src", "v", "20261121T000000")
        invalid = make_run(root / "src", "i", "20261121T000000", lose=True)
        check(spark, valid)
        check(spark, invalid)
        print(
            f"{'runs':>6} {'find':>8} {'index':>8} {'again':>8} {'serve up':>9}"
            f" {'page 1':>8} {'page 2':>8}"
        )
        for size in (int(s) for s in args.sizes.split(",")):
            store = store_of(root, size, valid, invalid)
            t0 = time.perf_counter()
            runs = find_runs([store])
            t1 = time.perf_counter()
            rows = build_index(spark, runs)
            t2 = time.perf_counter()
            build_index(spark, runs)
            t3 = time.perf_counter()
            assert len(rows) == size and sum(r.verdict == "invalid" for r in rows) == size // 10
            t4 = time.perf_counter()
            server = make_server(store, "127.0.0.1", 0, args.spark_master)  # builds the index
            t5 = time.perf_counter()
            threading.Thread(target=server.serve_forever, daemon=True).start()
            url = f"http://127.0.0.1:{server.server_address[1]}/"
            first, second = load(url), load(url)
            server.shutdown()
            server.server_close()
            print(
                f"{size:>6} {t1 - t0:>7.2f}s {t2 - t1:>7.2f}s {t3 - t2:>7.2f}s {t5 - t4:>8.2f}s"
                f" {first:>7.3f}s {second:>7.3f}s"
            )


if __name__ == "__main__":
    main()
