"""The manatee findings table: what the harness finds on seed 004, one row per workload, nemesis
and `--on-session-loss` choice (the seed as written, `keep`, against the operator's fix, `stop`).

Each row is one real run, one cluster at a time (a verdict is the point):

    harness run --cluster manatee --workload W --nemesis N --time T --seed S --on-session-loss L

read back from its run folder: verdict and anomalies, the generations seen (the highest), the
takeovers (a peer began to take writes alone), the worst recovery after a heal, the longest
stretch without an acknowledged write, acknowledged writes per second. Rows are appended to
`--rows` as each run ends (rows already there are skipped); `--table` prints them. FINDINGS.md
carries the table.

    nohup .venv/bin/python bench/manatee.py [--workloads set,append] [--nemeses
        partition-primary,kill-primary] [--losses keep,stop] [--time 300] > manatee.log 2>&1 &
    .venv/bin/python bench/manatee.py --table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from run_rows import anomalies, read_rows, rows_options, run_row, table, work_through

HARNESS = Path(sys.executable).parent / "harness"
COLUMNS = (
    ("workload", "workload"),
    ("nemesis", "nemesis"),
    ("loss", "on session loss"),
    ("seed", "seed"),
    ("verdict", "verdict"),
    ("anomalies", "anomalies"),
    ("generation", "last generation"),
    ("takeovers", "takeovers"),
    ("worst_recovery", "worst recovery s"),
    ("longest_gap", "no write s"),
    ("writes_per_s", "writes/s"),
    ("minutes", "run min"),
)


def run_one(workload: str, nemesis: str, loss: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        str(HARNESS), "run", "--cluster", "manatee", "--workload", workload, "--nemesis", nemesis,
        "--on-session-loss", loss, "--time", str(args.time), "--seed", str(args.seed),
    ]  # fmt: skip
    name = f"manatee-{workload.replace(',', '+')}-{nemesis}-{loss}-s{args.seed}"
    keys = {"workload": workload, "nemesis": nemesis, "loss": loss, "seed": args.seed}
    return run_row(cmd, args.store, name, keys, read_run)


def read_run(run: Path) -> dict[str, Any]:
    results = json.loads((run / "results.json").read_text())
    checkers = results.get("checkers") or {}
    avail = checkers.get("availability") or {}
    state = checkers.get("cluster-state") or {}
    terms = [s.get("term") for s in state.get("leaders") or [] if s.get("term") is not None]
    worst = avail.get("worst_recovery_s")
    return {
        "verdict": results.get("verdict"),
        "anomalies": "; ".join(anomalies(results)) or "none",
        "generation": max(terms, default=None),
        "takeovers": len(state.get("takeovers") or []),
        "worst_recovery": "never" if avail.get("never_recovered") else rounded(worst),
        "longest_gap": rounded(avail.get("longest_gap_s")),
        "writes_per_s": rounded(avail.get("acked_writes_per_s")),
    }


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="set,append", help="';'-separated runs' workloads")
    parser.add_argument("--nemeses", default="partition-primary,kill-primary")
    parser.add_argument("--losses", default="keep,stop", help="--on-session-loss choices")
    parser.add_argument("--time", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0)
    rows_options(parser, "manatee")
    args = parser.parse_args()
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return 0
    plan = [
        (w, n, loss, args.seed)
        for w in args.workloads.split(";")
        for n in args.nemeses.split(",")
        for loss in args.losses.split(",")
    ]
    work_through(
        args.rows,
        plan,
        lambda row: (row["workload"], row["nemesis"], row["loss"], row["seed"]),
        lambda w, n, loss, _seed: run_one(w, n, loss, args),
        lambda row: f"{row.get('verdict')}: {row.get('anomalies')}, {row.get('minutes')} min",
        args.until,
    )
    print(table(COLUMNS, read_rows(args.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
