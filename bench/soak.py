"""The soak: the users' long runs on the correct safekeeper cluster, one row per mode and fault
package, to show it stays correct and available for as long as they run it.

Each row is one `harness run --time T --nemesis PACKAGE --mode MODE --max-recovery B` (the real
command, one cluster at a time: a verdict is the point), read back from its run folder:

- verdict and anomalies (the bound makes a slow recovery an anomaly too);
- takeovers (another compute began to serve, as the cluster-state polls saw it), elections
  (terms won, counted in the computes' logs) and the safekeepers' last term: terms that climb
  far past the elections won mean duelling candidates, elections far past the takeovers a
  compute that keeps standing and failing;
- the worst recovery after a heal (and the worst counting only the seconds free of later
  faults: what the bound judges), the longest stretch without an acknowledged write, how long
  before the end the last write was acknowledged, and acknowledged writes per second;
- slow catch-ups: of the elections that brought a compute's Postgres to the log (from the term
  won to its WAL checked against the log, in the computes' logs), how many took over a second.
  A compute killed every few seconds serves again only if this is short.

Rows are appended to `--rows` (JSON lines) as each run ends, so a soak of hours can be read while
it goes and resumed (rows already there are skipped). `--table` prints the table of a rows file.

    nohup .venv/bin/python bench/soak.py [--time 600] [--modes durable,confirm-rollback]
        [--nemeses partition-majority,…] [--seeds 0] [--max-recovery 30] > soak.log 2>&1 &
    .venv/bin/python bench/soak.py --table [--rows results/soak/rows.jsonl]

A package may join faults with "+", as one run of both (`kill-primary+partition-primary`);
`--workloads` and `--nemesis-interval` pass through. tests/e2e/test_churn.py's command, on
seeds 0–3:

    nohup .venv/bin/python bench/soak.py --time 240 --modes durable --seeds 0,1,2,3 \
        --nemeses kill-primary+partition-primary --nemesis-interval 4 --workloads append,set \
        --rows bench/churn_rows.jsonl > churn.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from run_rows import anomalies, read_rows, rows_options, run_row, table, work_through

HARNESS = Path(sys.executable).parent / "harness"  # the one installed beside this Python
NEMESES = (
    "partition-majority",
    "partition-primary",
    "partition-ring",
    "kill-primary",
    "kill",
    "pause",
    "clock",
    "packet",
    "all",
)
MODES = ("durable", "confirm-rollback")  # the safekeeper kind's contracts
COLUMNS = (
    ("mode", "mode"),
    ("nemesis", "nemesis"),
    ("seed", "seed"),
    ("verdict", "verdict"),
    ("anomalies", "anomalies"),
    ("takeovers", "takeovers"),
    ("elections", "elections"),
    ("term", "last term"),
    ("worst_recovery", "worst recovery s"),
    ("worst_free", "of it free of faults s"),
    ("longest_gap", "no write s"),
    ("last_write_before_end", "last write before end s"),
    ("writes_per_s", "writes/s"),
    ("slow_catch_ups", "slow catch-ups"),
    ("minutes", "run min"),
)
SLOW_CATCH_UP = 1.0  # seconds
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+ (.*)$")


def run_one(mode: str, nemesis: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        str(HARNESS), "run", "--nemesis", nemesis.replace("+", ","), "--mode", mode,
        "--time", str(args.time), "--seed", str(seed), "--max-recovery", str(args.max_recovery),
    ]  # fmt: skip
    if args.workloads:
        cmd += ["--workload", args.workloads]
    if args.nemesis_interval is not None:
        cmd += ["--nemesis-interval", str(args.nemesis_interval)]
    keys = {"mode": mode, "nemesis": nemesis, "seed": seed}
    return run_row(cmd, args.store, f"soak-{mode}-{nemesis}-s{seed}", keys, read_run)


def catch_ups(log: str) -> list[float]:
    """Seconds from each term won to the compute's WAL checked against the log (or the missing
    part written), in one compute's log; an election followed by neither (the compute was
    killed first, or its term began the log) is left out."""
    took, elected = [], None
    for line in log.splitlines():
        if not (m := LOG_LINE.match(line)):
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if "elected in term" in m.group(2):
            elected = at
        elif "compute agent" in m.group(2):
            elected = None  # restarted
        elif elected is not None and ("holds the log" in m.group(2) or "wrote WAL" in m.group(2)):
            took.append(at - elected)
            elected = None
    return took


def read_run(run: Path) -> dict[str, Any]:
    """What a row shows of a finished run folder."""
    out: dict[str, Any] = {}
    results_path = run / "results.json"
    if not results_path.exists():
        return {"verdict": "not checked", "anomalies": f"no results.json in {run}"}
    results = json.loads(results_path.read_text())
    out["verdict"] = results.get("verdict")
    out["anomalies"] = "; ".join(anomalies(results)) or "none"
    avail = (results.get("checkers") or {}).get("availability") or {}
    worst = avail.get("worst_recovery_s")
    out["worst_recovery"] = "never" if avail.get("never_recovered") else rounded(worst)
    free = [w["free_s"] for w in avail.get("windows") or [] if w.get("free_s") is not None]
    out["worst_free"] = rounded(max(free, default=None))  # what --max-recovery judges
    out["longest_gap"] = rounded(avail.get("longest_gap_s"))
    last, end = avail.get("last_write_s"), avail.get("writes_end_s")
    out["last_write_before_end"] = rounded(end - last) if None not in (last, end) else None
    out["writes_per_s"] = rounded(avail.get("acked_writes_per_s"))
    logs = list((run / "nodes").glob("*/harness/compute.log"))
    text = [p.read_text(errors="replace") for p in logs]
    state = (results.get("checkers") or {}).get("cluster-state") or {}
    if state.get("rounds"):  # the serving compute changed: what users call a failover
        out["takeovers"] = len(state.get("takeovers") or [])
    else:
        out["takeovers"] = sum(t.count("taking over") for t in text)
    out["elections"] = sum(t.count("elected in term") for t in text)
    took = [s for t in text for s in catch_ups(t)]
    out["slow_catch_ups"] = f"{sum(s > SLOW_CATCH_UP for s in took)} of {len(took)}"
    status_path = run / "nodes" / "cluster-status.json"
    if status_path.exists():
        status = json.loads(status_path.read_text())
        terms = [n.get("term") for n in status.get("nodes", {}).values() if n.get("term")]
        out["term"] = max(terms, default=None)
    return out


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", type=float, default=600.0, help="seconds of each run")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--nemeses", default=",".join(NEMESES))
    parser.add_argument("--seeds", default="0", help="comma-separated; a row each")
    parser.add_argument("--workloads", help="harness run's --workload (its default if unset)")
    parser.add_argument("--nemesis-interval", type=float, help="harness run's, if set")
    parser.add_argument("--max-recovery", type=float, default=30.0, help="the bound, seconds")
    rows_options(parser, "soak")
    args = parser.parse_args()
    if args.table:  # each row read again from its run folder while that is still there
        rows = read_rows(args.rows)
        fresh = [r | read_run(Path(r["run"])) if Path(r.get("run") or "/-").is_dir() else r
                 for r in rows]  # fmt: skip
        print(table(COLUMNS, fresh))
        return 0
    work_through(
        args.rows,
        # both modes of a package in turn, so that a soak cut short covers packages whole
        [
            (m, n, int(seed))
            for seed in args.seeds.split(",")
            for n in args.nemeses.split(",")
            for m in args.modes.split(",")
        ],
        lambda row: (row["mode"], row["nemesis"], row["seed"]),
        lambda mode, nemesis, seed: run_one(mode, nemesis, seed, args),
        lambda row: (
            f"{row.get('verdict')}: {row.get('anomalies')}; worst recovery "
            f"{row.get('worst_recovery')} s, {row.get('minutes')} min"
        ),
        args.until,
    )
    print(table(COLUMNS, read_rows(args.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
