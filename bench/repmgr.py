"""repmgr's fencing choices under the faults its users meet, each one `harness run --cluster
repmgr` whose row gives the verdict, the lost and stale elements, the seconds two members took
writes at once, and how long after a kill of the primary the next write was acknowledged beside
the configured reconnect_attempts × reconnect_interval.

The faults: kills of the primary, the primary partitioned from its standbys and the witness (its
clients still reach it), the witness cut off, and `restart-deposed` (a failover, then the old
primary started again as it was, as an operator or an init system does after a crash). Each of
`none`, `consensus` and `disconnect-command` fencing, with asynchronous and synchronous
replication, with the witness and without it.

    nohup .venv/bin/python bench/repmgr.py [--time 300] [--configs none-async,…]
        [--seeds 0] [--until HH:MM] > repmgr.log 2>&1 &
    .venv/bin/python bench/repmgr.py --table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from run_rows import (
    anomalies,
    bench_configs,
    checked_run,
    kill_to_write,
    rows_options,
    run_row,
    suite_judgment,
)

HARNESS = Path(sys.executable).parent / "harness"
FAULTS = "kill-primary,partition-primary,partition-dcs,restart-deposed"
NO_WITNESS_FAULTS = "kill-primary,partition-primary,restart-deposed"


def _config(fencing: str, replication: str, witness: bool) -> tuple[tuple[str, ...], str]:
    """The kind's options and the faults of one configuration."""
    options = ("--repmgr-fencing", fencing, "--replication", replication,
               "--witness", "on" if witness else "off")  # fmt: skip
    return options, FAULTS if witness else NO_WITNESS_FAULTS


# name → (the kind's options, --nemesis)
CONFIGS: dict[str, tuple[tuple[str, ...], str]] = {
    f"{fencing}-{replication}{'' if witness else '-nowitness'}": _config(
        fencing, replication, witness
    )
    for witness in (True, False)
    for replication in ("async", "sync")
    for fencing in ("none", "consensus", "disconnect-command")
}
COLUMNS = (
    ("config", "config"),
    ("seed", "seed"),
    ("seconds", "s"),
    ("verdict", "verdict"),
    ("anomalies", "anomalies"),
    ("suite_lost", "lost"),
    ("two_writable_s", "two writable s"),
    ("kill_to_write_s", "kill → write s (worst)"),
    ("configured_s", "attempts × interval s"),
    ("failovers", "takeovers"),
    ("restarts", "deposed restarted (promoted first)"),
    ("writes_per_s", "writes/s"),
    ("minutes", "run min"),
)


def run_one(config: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    options, faults = CONFIGS[config]
    cmd = [
        str(HARNESS), "run", "--cluster", "repmgr", *options,
        "--reconnect-attempts", str(args.attempts), "--reconnect-interval", str(args.interval),
        "--workload", "set,append", "--nemesis", faults, "--time", str(args.time),
        "--seed", str(seed), "--rate", "50",
    ]  # fmt: skip
    keys = {
        "config": config,
        "seed": seed,
        "seconds": args.time,
        "configured_s": args.attempts * args.interval,
    }
    return run_row(cmd, args.store, f"repmgr-{config}-s{seed}", keys, read_run)


def two_writable_s(leaders: list[dict[str, Any]], end_s: float) -> float:
    """Seconds of the run in which two or more members took writes, from the cluster-state
    checker's stretches (the last one, open, lasts to `end_s`, the run's last event)."""
    return round(sum((s["end"] or end_s) - s["start"] for s in leaders if len(s["nodes"]) > 1), 1)


def restarts(history: list[dict[str, Any]]) -> str:
    """How many restart-deposed faults struck, and after how many of them a standby had been
    promoted first (so that the restart made a second primary)."""
    done = [op.get("value") or {} for op in history
            if op.get("process") == "nemesis" and op["type"] == "info"
            and op["f"] == "start-restart-deposed" and not op.get("error")]  # fmt: skip
    struck = [v for v in done if v.get("deposed")]
    return f"{len(struck)} ({sum(1 for v in struck if v.get('promoted'))})"


def read_run(run: Path) -> dict[str, Any]:
    """What a row shows of a checked run folder."""
    results, history, checkers = checked_run(run)
    state = checkers.get("cluster-state") or {}
    per_s = (checkers.get("availability") or {}).get("acked_writes_per_s")
    return suite_judgment(history) | {
        "verdict": results.get("verdict"),
        "anomalies": "; ".join(anomalies(results)) or "none",
        "two_writable_s": two_writable_s(state.get("leaders") or [], history[-1]["time"] / 1e9),
        "kill_to_write_s": kill_to_write(history),
        "failovers": len(state.get("takeovers") or []),
        "restarts": restarts(history),
        "writes_per_s": None if per_s is None else round(per_s, 1),
    }


def said(row: dict[str, Any]) -> str:
    """The progress line of a row."""
    return f"{row['verdict']}: lost {row.get('suite_lost')}, {row.get('anomalies')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", type=float, default=300.0, help="seconds of each run")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=", ".join(CONFIGS))
    parser.add_argument("--seeds", default="0")
    parser.add_argument(
        "--attempts", type=int, default=3, help="the kind's --reconnect-attempts (default 3)"
    )
    parser.add_argument(
        "--interval", type=int, default=5, help="the kind's --reconnect-interval (default 5 s)"
    )
    rows_options(parser, "repmgr", Path(__file__).resolve().parent / "repmgr_rows.jsonl")
    args = parser.parse_args()
    return bench_configs(parser, args, CONFIGS, COLUMNS, run_one, said)


if __name__ == "__main__":
    sys.exit(main())
