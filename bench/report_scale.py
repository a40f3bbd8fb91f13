"""Report at scale: a generated append history of 100k and 1M operations, checked, then rendered.

    .venv/bin/python bench/report_scale.py [--ops 100000,1000000] [--keep DIR]

The history is what a run of 20 workers would write (DESIGN.md's format, through the list-append
history writer): transactions of appends and reads over rotating keys, each taking effect at one
instant inside its interval (so the history is valid), some failing and some unknown (a worker
then goes on as a new process), and a nemesis killing and partitioning every 10 s. It prints the
time the pipeline took, the time report.html took to render and the page's size.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from checkers.listappend.history import Txn, write_history

WORKERS = 20
KEYS_LIVE = 40  # keys written at any moment; one with APPENDS_PER_KEY appends gives way
APPENDS_PER_KEY = 64
FAULT_EVERY_S = 10.0


def generate(ops: int, path: Path, seed: int = 0) -> None:
    """Write a history of `ops` client transactions (plus the nemesis's operations) at `path`."""
    rng = random.Random(seed)
    planned = []  # (effect time, start, end, worker-local process, type, mops as invoked)
    clock = [rng.uniform(0, 0.01) for _ in range(WORKERS)]
    process = list(range(WORKERS))
    next_key, appended = KEYS_LIVE, dict.fromkeys(range(KEYS_LIVE), 0)
    for n in range(ops):
        w = n % WORKERS
        start = clock[w]
        took = rng.lognormvariate(-5.5, 0.6)  # about 4 ms
        outcome = rng.choices(("ok", "fail", "info"), (0.96, 0.025, 0.015))[0]
        mops = []
        for _ in range(rng.randint(1, 4)):
            key = rng.choice(list(appended))
            if rng.random() < 0.5:
                appended[key] += 1
                mops.append(("append", key, appended[key]))
                if appended[key] >= APPENDS_PER_KEY:
                    del appended[key]
                    appended[next_key] = 0
                    next_key += 1
            else:
                mops.append(("r", key, None))
        effect = start + took * rng.random()
        planned.append((effect, start, start + took, process[w], outcome, mops))
        clock[w] = start + took + rng.uniform(0, 0.002)
        if outcome == "info":
            process[w] += WORKERS
    txns, events = _apply(planned, rng), []
    for t in txns:
        events += [(t.start, 0, t), (t.end, 1, t)]
    faults = _faults(max(clock))
    events += [(at, 2, f) for f in faults for at in (f["start"], f["end"])]
    events.sort(key=lambda e: (e[0], e[1]))
    index_of: dict[int, list[int]] = {}
    for i, (_, _, item) in enumerate(events):
        index_of.setdefault(id(item), []).append(i)
    ns = 1_000_000_000
    numbered = [
        Txn(*index_of[id(t)], t.process, t.type, int(t.start * ns), int(t.end * ns), t.mops)
        for t in txns
    ]
    write_history(numbered, path)
    with path.open("a", encoding="utf-8") as out:
        for f in faults:
            invoke, done = index_of[id(f)]
            for i, at, kind in ((invoke, f["start"], "invoke"), (done, f["end"], "info")):
                event = {"index": i, "time": int(at * ns), "process": "nemesis", "type": kind}
                out.write(json.dumps(event | {"f": f["f"], "value": f["value"]}) + "\n")


def _apply(planned: list[tuple[Any, ...]], rng: random.Random) -> list[Txn]:
    """Each transaction takes effect at its instant, in that order: reads see what came before.
    A failed one never takes effect; an unknown one does half the time."""
    state: dict[int, list[int]] = {}
    txns = []
    for _, start, end, process, outcome, mops in sorted(planned, key=lambda p: p[0]):
        applies = outcome == "ok" or (outcome == "info" and rng.random() < 0.5)
        done = []
        for f, k, v in mops:
            if f == "append":
                if applies:
                    state.setdefault(k, []).append(v)
                done.append((f, k, v))
            else:
                done.append((f, k, tuple(state.get(k, [])) if outcome == "ok" else None))
        txns.append(Txn(0, 0, process, outcome, start, end, tuple(done)))
    return txns


def _faults(end: float) -> list[dict[str, Any]]:
    """A kill or a partition every FAULT_EVERY_S, each lasting half of that."""
    faults, at = [], FAULT_EVERY_S / 2
    while at + FAULT_EVERY_S / 2 < end:
        kind = "kill" if len(faults) % 4 == 0 else "partition-majority"
        value = {"targets": ["n1"]} if kind == "kill" else {"grudge": {"n1": ["n2", "n3"]}}
        faults += [{"f": f"start-{kind}", "start": at, "end": at + 0.05, "value": value}]
        faults += [{"f": f"stop-{kind}", "start": at + 5, "end": at + 5.05, "value": None}]
        at += FAULT_EVERY_S
    return faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="100000,1000000", help="comma-separated history sizes")
    parser.add_argument("--keep", type=Path, help="keep each run's folder under this directory")
    args = parser.parse_args()

    from checkers.spark.pipeline import analyze
    from checkers.spark.session import get_spark
    from core import store
    from harness.plan import TestPlan
    from harness.report import render_report

    spark = get_spark(None)
    root = args.keep or Path(tempfile.mkdtemp(prefix="report-scale-"))
    for ops in (int(n) for n in args.ops.split(",")):
        run = root / f"{ops}"
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        began = time.perf_counter()
        generate(ops, run / store.HISTORY)
        generated = time.perf_counter() - began
        config = {"cluster": "safekeeper", "workloads": ["append"], "concurrency": WORKERS}
        store.write_json(run / store.CONFIG, config)
        began = time.perf_counter()
        plan = TestPlan.of_config(config)
        results = analyze(
            spark, run / store.HISTORY, run, plan.checkers(), plan.params(), writes=plan.writes
        )
        checked = time.perf_counter() - began
        results["config"], results["plan"] = config, plan.to_json()
        store.write_json(run / store.RESULTS, results)
        began = time.perf_counter()
        render_report(results, run / store.REPORT, run)
        rendered = time.perf_counter() - began
        size = (run / store.REPORT).stat().st_size
        print(
            f"{ops:>9} ops: generated {generated:6.1f} s, checked {checked:6.1f} s "
            f"({results['verdict']}), rendered {rendered:5.1f} s, report.html {size / 1e6:5.1f} MB"
            f"  {run / store.REPORT}",
            flush=True,
        )
    if args.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
