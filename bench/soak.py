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
  before the end the last write was acknowledged, and acknowledged writes per second.

Rows are appended to `--rows` (JSON lines) as each run ends, so a soak of hours can be read while
it goes and resumed (rows already there are skipped). `--table` prints the table of a rows file.

    nohup .venv/bin/python bench/soak.py [--time 600] [--modes durable,confirm-rollback]
        [--nemeses partition-majority,…] [--seed 0] [--max-recovery 30] > soak.log 2>&1 &
    .venv/bin/python bench/soak.py --table [--rows results/soak/rows.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
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
    ("minutes", "run min"),
)


def run_one(mode: str, nemesis: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        str(HARNESS), "run", "--nemesis", nemesis, "--mode", mode, "--time", str(args.time),
        "--seed", str(args.seed), "--max-recovery", str(args.max_recovery),
    ]  # fmt: skip
    keys = {"mode": mode, "nemesis": nemesis, "seed": args.seed}
    return run_row(cmd, args.store, f"soak-{mode}-{nemesis}-s{args.seed}", keys, read_run)


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
    parser.add_argument("--seed", type=int, default=0)
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
        [(m, n, args.seed) for n in args.nemeses.split(",") for m in args.modes.split(",")],
        lambda row: (row["mode"], row["nemesis"], row["seed"]),
        lambda mode, nemesis, _seed: run_one(mode, nemesis, args),
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
