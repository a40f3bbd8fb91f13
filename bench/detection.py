"""The detection table: does a run catch each planted bug, and does the correct cluster stay
valid? What a harness is worth is what it finds in the runs users make.

For each configuration (the correct cluster as the control, each planted bug, the epoch variant
that seed 003 shows unsafe), in each mode it applies to, up to `--seeds` runs of the real
command, one cluster at a time:

    harness run --workload bank,append,set --nemesis all --time 120 --seed S [--bug B | --variant V]

stopping at the first red run (`--every-seed`: every seed, to count how often a run catches
it). `--options` adds `harness run` options to every run; `--require-moment NAME[=COUNT]` says in
a row which valid runs did not reach a moment of the protocol (a run that never reached it is no
evidence about the code it exercises); every row counts the moments its runs reached.

Seed 003's hole in the epoch variant, which `all` reaches only now and then (the aimed package
draws its history as one scenario among the others), with the package that places it alone and
its control:

    .venv/bin/python bench/detection.py --nemesis partition-seed003 --workload append,set
        --time 150 --modes durable --only control,"variant epoch" --every-seed
        --options "--safekeepers 5 --nemesis-interval 20"

A row: the configuration, caught in run k of n (or not), the
anomalies named, and when the first anomalous operation began (s into the run); for the control,
every run is made and any red one is a false alarm. Rows are appended to `--rows` as each
configuration ends (resumed: configurations already there are skipped); `--table` prints them.

    nohup .venv/bin/python bench/detection.py [--nemesis all] [--time 120] [--seeds 0,1,2]
        [--only control,recover-lowest] > detection.log 2>&1 &
    .venv/bin/python bench/detection.py --table
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

from run_rows import (
    anomalies,
    commit,
    first_anomaly_s,
    latest_run,
    moments_reached,
    moments_text,
    read_rows,
    rows_options,
    table,
    work_through,
)

from core.errors import BadInput
from harness.gate import parse_required
from systems.walkeeper.bugs import NAMES as BUGS

HARNESS = Path(sys.executable).parent / "harness"
MODES = ("durable", "confirm-rollback")  # the safekeeper kind's contracts
# name → the options that plant it; the control is the correct cluster.
CONFIGS: dict[str, list[str]] = {
    "control": [],
    **{bug: ["--bug", bug] for bug in BUGS},
    "variant epoch": ["--variant", "epoch"],
}
COLUMNS = (
    ("config", "configuration"),
    ("mode", "mode"),
    ("nemesis", "nemesis"),
    ("caught", "caught"),
    ("anomalies", "anomalies named"),
    ("first_anomaly_s", "first anomalous op s"),
    ("moments", "moments reached"),
    ("seeds", "seeds run"),
    ("minutes", "run min"),
)


def run_once(config: str, mode: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One `harness run`; what its results say."""
    name = f"detect-{config.replace(' ', '-')}-{mode}-{args.nemesis}-s{seed}"
    cmd = [
        str(HARNESS), "run", "--workload", args.workload, "--nemesis", args.nemesis,
        "--time", str(args.time), "--seed", str(seed), "--mode", mode, *CONFIGS[config],
        "--store", str(args.store), "--name", name, *shlex.split(args.options),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    run = latest_run(args.store / name)
    results_path = run / "results.json" if run else None
    if results_path is None or not results_path.exists():
        return {"exit": done.returncode, "error": done.stderr.strip()[-300:], "run": str(run)}
    results = json.loads(results_path.read_text())
    return {
        "exit": done.returncode,
        "verdict": results.get("verdict"),
        "anomalies": anomalies(results),
        "first_anomaly_s": first_anomaly_s(results),
        "moments": moments_reached(results),
        "run": str(run),
    }


def detect(config: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Runs of one configuration, seed after seed, until one is red (the control: all)."""
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.monotonic()
    runs = []
    for seed in seeds:
        runs.append(one := run_once(config, mode, seed, args) | {"seed": seed})
        print(f"    seed {seed}: {one.get('verdict') or one.get('error')}", flush=True)
        if one.get("verdict") == "invalid" and config != "control" and not args.every_seed:
            break
    red = [r for r in runs if r.get("verdict") == "invalid"]
    row: dict[str, Any] = {
        "config": config,
        "mode": mode,
        "nemesis": args.nemesis,
        "seeds": ",".join(str(r["seed"]) for r in runs),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
        "runs": runs,
    }
    if config == "control":
        row["caught"] = f"false alarm in {len(red)} of {len(runs)}" if red else "valid in all"
    else:
        row["caught"] = f"run {len(runs)} of {len(seeds)}" if red else f"not in {len(runs)}"
        if red and args.every_seed:
            row["caught"] = f"{len(red)} of {len(runs)}"
    if red:
        row["anomalies"] = "; ".join(sorted({a for r in red for a in r["anomalies"]}))
        row["first_anomaly_s"] = red[0]["first_anomaly_s"]
    reached: dict[str, int] = {}
    for r in runs:
        for name, n in (r.get("moments") or {}).items():
            reached[name] = reached.get(name, 0) + n
    row["moments"] = moments_text(reached)
    # a valid run that never reached a required moment proves nothing about it
    short = [
        f"seed {r['seed']}: {name}"
        for r in runs
        if r.get("verdict") == "valid"
        for name, least in args.require_moment.items()
        if (r.get("moments") or {}).get(name, 0) < least
    ]
    if short:
        row["caught"] += f" (not reached: {', '.join(short)})"
    errors = [r for r in runs if r.get("verdict") is None]
    if errors:
        row["caught"] += f" ({len(errors)} runs failed: {errors[0].get('error')})"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nemesis", default="all", help="the fault packages of every run")
    parser.add_argument("--workload", default="bank,append,set")
    parser.add_argument("--time", type=float, default=120.0, help="seconds of each run")
    parser.add_argument("--seeds", default="0,1,2", help="the seeds to try, in order")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--options", default="", help="more `harness run` options for each run")
    parser.add_argument(
        "--every-seed", action="store_true", help="run every seed, not only up to a red run"
    )
    parser.add_argument(
        "--only", default=",".join(CONFIGS), help=f"configurations: {', '.join(CONFIGS)}"
    )
    parser.add_argument(
        "--require-moment",
        action="append",
        default=[],
        metavar="NAME[=COUNT]",
        help="a moment each valid run must reach (as `harness gate --require-moment`): a row "
        "says which runs did not",
    )
    rows_options(parser, "detection")
    args = parser.parse_args()
    try:
        args.require_moment = parse_required(args.require_moment)
    except BadInput as e:
        parser.error(str(e))
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return 0
    unknown = sorted(set(args.only.split(",")) - set(CONFIGS))
    if unknown:
        parser.error(f"no configuration {', '.join(unknown)}; there are {', '.join(CONFIGS)}")
    work_through(
        args.rows,
        [(c, m, args.nemesis) for c in args.only.split(",") for m in args.modes.split(",")],
        lambda row: (row["config"], row["mode"], row["nemesis"]),
        lambda config, mode, _nemesis: detect(config, mode, args),
        lambda row: f"{row['caught']}: {row.get('anomalies', '')}",
        args.until,
    )
    print(table(COLUMNS, read_rows(args.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
