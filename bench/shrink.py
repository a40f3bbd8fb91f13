"""The table of shrinks: each red run of a configuration cut down by `harness shrink`, one row per
red run with its faults and seconds before and after, the candidates tried, the wall time and
the minimal command's reproduction rate.

A case is a `harness run` that should come out red (a planted bug under `--nemesis all`, or a
finding's command); the bench runs it with the next seeds until one is red (at most --tries),
then shrinks that run:

    nohup .venv/bin/python bench/shrink.py [--cases ack-before-quorum,…] [--budget 60]
        [--until HH:MM] > shrink.log 2>&1 &
    .venv/bin/python bench/shrink.py --table
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from run_rows import commit, latest_run, read_rows, rows_options, table, work_through

HARNESS = Path(sys.executable).parent / "harness"
ROWS = Path(__file__).resolve().parent / "shrink_rows.jsonl"  # kept with the project
ALL_120 = ("--nemesis", "all", "--time", "120")
# name → (what it is, the run's options, the anomaly type to keep or None: every type it shows)
CASES: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "ack-before-quorum": (
        "planted: a commit acknowledged before a quorum holds it",
        ("--bug", "ack-before-quorum", "--workload", "set", *ALL_120),
        "lost-acknowledged-write",
    ),
    "recover-lowest": (
        "planted: a new term recovers from the lowest log",
        ("--bug", "recover-lowest", "--workload", "set", *ALL_120),
        "term-below-commit",
    ),
    "deposed-primary-serves": (
        "planted: a deposed primary keeps serving",
        ("--bug", "deposed-primary-serves", "--workload", "set", *ALL_120),
        None,
    ),
    "skip-fsync": (
        "planted: a safekeeper acknowledges before its fsync",
        ("--bug", "skip-fsync", "--workload", "set", *ALL_120),
        "lost-acknowledged-write",
    ),
    "patroni-killed": (
        "FINDINGS Patroni 3: Patroni killed on the primary, its Postgres writable beside another",
        ("--cluster", "patroni", "--patroni-sync", "off", "--workload", "set", "--rate", "50",
         "--nemesis", "partition-halves,partition-ring,partition-one,switchover,kill-postgres,"
         "kill-patroni", "--nemesis-interval", "60", "--time", "600"),
        None,
    ),
    "patroni-cancelled": (
        "FINDINGS Patroni 2: a cancelled COMMIT acknowledged, then lost (patroni#1412)",
        ("--cluster", "patroni", "--patroni-sync", "quorum", "--workload", "set", "--rate", "50",
         "--nemesis", "partition-halves,partition-ring,partition-one,switchover,kill-postgres,"
         "kill-patroni", "--nemesis-interval", "60", "--time", "900", "--cancel-after", "1"),
        "lost",
    ),
    "streaming-cancelled": (
        "FINDINGS streaming 1: a cancelled COMMIT acknowledged, then lost at the next failover",
        ("--cluster", "streaming", "--replication", "sync", "--nemesis", "promote",
         "--workload", "append,set", "--cancel-after", "1", "--time", "120"),
        "lost",
    ),
    "tarantool-resurrected": (
        "FINDINGS Tarantool 2: writes the client was told were rolled back come back",
        ("--cluster", "tarantool", "--workload", "set", "--nemesis", "kill-primary",
         "--time", "120"),
        "resurrected-rollback",
    ),
    "repmgr-cut-off": (
        "FINDINGS repmgr 2: a primary cut off keeps acknowledging after another is promoted",
        ("--cluster", "repmgr", "--witness", "off", "--nemesis", "partition-primary",
         "--time", "180"),
        "deposed-primary-acknowledged-writes",
    ),
}  # fmt: skip
COLUMNS = (
    ("case", "case"),
    ("seed", "red seed"),
    ("faults_before", "faults"),
    ("faults_after", "faults after"),
    ("seconds_before", "s"),
    ("seconds_after", "s after"),
    ("tried", "candidates"),
    ("wall_min", "wall min"),
    ("rate", "reproduced"),
    ("kept", "kept"),
    ("command", "minimal command"),
)


def red_run(case: str, args: argparse.Namespace) -> tuple[Path | None, int | None]:
    """The first red run of the case over the next --tries seeds: its folder and seed."""
    _, options, _ = CASES[case]
    for seed in range(args.seed, args.seed + args.tries):
        name = f"shrink-{case}-s{seed}"
        subprocess.run([str(HARNESS), "run", *options, "--seed", str(seed), "--store",
                        str(args.store), "--name", name], capture_output=True)  # fmt: skip
        run = latest_run(args.store / name)
        results = run / "results.json" if run else None
        if (
            results
            and results.is_file()
            and json.loads(results.read_text())["verdict"] == "invalid"
        ):
            return run, seed
    return None, None


def shrink_one(case: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {"case": case, "about": CASES[case][0], "date": time.strftime("%Y-%m-%d"),
                           "commit": commit()}  # fmt: skip
    run, seed = red_run(case, args)
    if run is None:
        return row | {"seed": None, "command": f"no red run in {args.tries} seeds"}
    keep = CASES[case][2]
    cmd = [str(HARNESS), "shrink", str(run), "--budget", str(args.budget),
           "--repeats", str(args.repeats), "--confirm", str(args.confirm)]  # fmt: skip
    done = subprocess.run([*cmd, *(["--keep", keep] if keep else [])], capture_output=True,
                          text=True)  # fmt: skip
    summary_file = run.parent.parent / "shrink" / f"{run.parent.name}-{run.name}" / "shrink.json"
    if not summary_file.is_file():
        return row | {"seed": seed, "command": f"shrink ended {done.returncode}: "
                      f"{done.stderr.strip()[-200:]}"}  # fmt: skip
    s = json.loads(summary_file.read_text())
    return row | {
        "seed": seed,
        "run": str(run),
        "faults_before": s["original"]["faults"],
        "faults_after": s["minimal"]["faults"],
        "seconds_before": s["original"]["time"],
        "seconds_after": s["minimal"]["time"],
        "tried": s["tried"],
        "wall_min": round((time.monotonic() - started) / 60, 1),
        "rate": f"{s['shown']} of {s['confirm']}",
        "kept": ", ".join(s["kept"]),
        "command": s["command"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=", ".join(CASES))
    parser.add_argument("--seed", type=int, default=0, help="the first seed tried for a red run")
    parser.add_argument("--tries", type=int, default=3, help="seeds tried for a red run")
    parser.add_argument("--budget", type=float, default=60.0, help="minutes of each shrink")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--confirm", type=int, default=5)
    rows_options(parser, "shrink", ROWS)
    args = parser.parse_args()
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return 0
    cases = [c for c in args.cases.split(",") if c]
    if unknown := [c for c in cases if c not in CASES]:
        parser.error(f"unknown case {unknown[0]!r}: choose from {', '.join(CASES)}")
    work_through(
        args.rows,
        [(c,) for c in cases],
        lambda row: (row["case"],),
        lambda case: shrink_one(case, args),
        lambda row: (
            f"{row.get('faults_before')} → {row.get('faults_after')} faults, "
            f"reproduced {row.get('rate')}"
        ),
        until=args.until,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
