"""Exploration against seeds' luck, on the same budget: what `harness explore` reaches in an hour
beside what repeated runs of `--nemesis all` with fresh seeds reach, on one configuration.

For each strategy of `--strategies` (one cluster at a time, each for `--budget` minutes):

    explore: harness explore --budget B --time T [--options]     (a fresh corpus each sitting)
    explore-all: harness explore --nemesis all …   (all's faults, its aimed ones explored)
    all:     harness run --nemesis all --time T --seed S [--options], S = --first-seed, +1, …

A row per strategy and sitting: runs made and their verdicts (a red run is a finding, or a false
alarm on the correct cluster), the distinct steps and pairs of steps the aimed faults reached
(the union over its runs) and pairs per hour, how often each of the kind's moments was reached
(and per hour: on Patroni `leader-key-taken` is its failovers), and the first red run. Rows are
appended to `--rows` as each sitting ends; `--table` prints them.

    nohup .venv/bin/python bench/explore.py --budget 120 [--strategies explore,all]
        [--options "--mode confirm-rollback"] [--time 60] > explore.log 2>&1 &
    .venv/bin/python bench/explore.py --table
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from run_rows import append_row, commit, latest_run, moments_reached, read_rows, rows_options, table

HERE = Path(__file__).resolve().parent
HARNESS = Path(sys.executable).parent / "harness"
ROWS = HERE / "explore_rows.jsonl"
STRATEGIES = ("explore", "explore-all", "all")
COLUMNS = (
    ("strategy", "strategy"),
    ("options", "options"),
    ("budget_min", "budget min"),
    ("runs", "runs"),
    ("verdicts", "verdicts"),
    ("steps", "distinct steps"),
    ("pairs", "distinct pairs"),
    ("pairs_per_hour", "pairs / h"),
    ("moments_per_hour", "moments reached / h"),
    ("red", "first red run"),
)


def chains_of(run: Path) -> dict[str, Any]:
    """A checked run's verdict, steps and pairs reached, and moments reached."""
    path = run / "results.json"
    if not path.is_file():
        return {"verdict": "error", "steps": {}, "pairs": {}, "moments": {}}
    results = json.loads(path.read_text())
    state = (results.get("checkers") or {}).get("cluster-state") or {}
    chains = state.get("chains") or {}
    return {
        "verdict": results.get("verdict"),
        "steps": chains.get("steps") or {},
        "pairs": chains.get("pairs") or {},
        "moments": moments_reached(results),
    }


def explored(args: argparse.Namespace, store: Path, nemesis: str) -> list[Path]:
    """One exploration of the budget; the run folders it made, in order."""
    cmd = [str(HARNESS), "explore", "--budget", str(args.budget), "--time", str(args.time),
           "--nemesis", nemesis, "--seed", str(args.first_seed), "--store", str(store),
           *shlex.split(args.options)]  # fmt: skip
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=False)
    corpora = sorted((store / "explore").glob("*.json"))
    runs = json.loads(corpora[-1].read_text())["runs"] if corpora else []
    return [Path(r["run"]) for r in runs if r.get("run") not in (None, "None")]


def seeded(args: argparse.Namespace, store: Path) -> list[Path]:
    """Runs of `all` with fresh seeds until the budget is spent; their folders."""
    began = time.monotonic()
    runs: list[Path] = []
    seed = args.first_seed
    last = 0.0
    while (time.monotonic() - began) / 60 + last <= args.budget or not runs:
        start = time.monotonic()
        name = f"all-s{seed}"
        cmd = [str(HARNESS), "run", "--nemesis", "all", "--time", str(args.time),
               "--seed", str(seed), "--store", str(store), "--name", name,
               *shlex.split(args.options)]  # fmt: skip
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=False, capture_output=True)
        last = (time.monotonic() - start) / 60
        run = latest_run(store / name)
        if run is not None:
            runs.append(run)
            if chains_of(run)["verdict"] == "invalid":
                break
        seed += 1
    return runs


def sitting(strategy: str, args: argparse.Namespace) -> dict[str, Any]:
    store = args.store / f"{strategy}-{time.strftime('%Y%m%dT%H%M%S')}"
    began = time.monotonic()
    if strategy == "all":
        runs = seeded(args, store)
    else:
        runs = explored(args, store, "aimed" if strategy == "explore" else "all")
    hours = (time.monotonic() - began) / 3600
    read = [chains_of(r) for r in runs]
    steps = {k for r in read for k in r["steps"]}
    pairs = {k for r in read for k in r["pairs"]}
    verdicts: dict[str, int] = {}
    moments: dict[str, int] = {}
    for r in read:
        verdicts[str(r["verdict"])] = verdicts.get(str(r["verdict"]), 0) + 1
        for name, n in r["moments"].items():
            moments[name] = moments.get(name, 0) + n
    red = next((str(run) for run, r in zip(runs, read, strict=True) if r["verdict"] == "invalid"),
               None)  # fmt: skip
    return {
        "strategy": strategy,
        "options": args.options,
        "time_s": args.time,
        "budget_min": args.budget,
        "hours": round(hours, 2),
        "runs": len(runs),
        "verdicts": ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())),
        "steps": len(steps),
        "pairs": len(pairs),
        "pairs_per_hour": round(len(pairs) / hours, 1) if hours else None,
        "moments": moments,
        "moments_per_hour": ", ".join(f"{m} {n / hours:.1f}" for m, n in moments.items())
        if hours
        else "",
        "red": red,
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategies", default="explore,all", help=", ".join(STRATEGIES))
    parser.add_argument("--budget", type=float, default=60.0, help="minutes for each strategy")
    parser.add_argument("--time", type=float, default=60.0, help="seconds of each run")
    parser.add_argument("--first-seed", type=int, default=1000, help="a seed no row used yet")
    parser.add_argument("--options", default="", help="more options for every run")
    rows_options(parser, "explore-bench", ROWS)
    args = parser.parse_args()
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return 0
    for strategy in args.strategies.split(","):
        if strategy not in STRATEGIES:
            parser.error(f"no strategy {strategy!r}: choose from {', '.join(STRATEGIES)}")
    for strategy in args.strategies.split(","):
        row = sitting(strategy, args)
        append_row(args.rows, row)
        print(json.dumps(row), flush=True)
    print(table(COLUMNS, read_rows(args.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
