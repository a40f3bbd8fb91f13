"""The Patroni project's own Jepsen suite, run here, beside what it does not look at.

Patroni's suite (the `jepsen/` folder of its repository, 2025): Patroni 4 with
`synchronous_mode: quorum`, strict, failsafe and check_timeline on (the `suite` row; the others
change the mode or the clients); a set workload of unique inserts at about 50 a second with 5 s
timeouts; faults drawn from {random halves, majorities ring, one node cut off, a switchover, a
kill -9 of postgres or of patroni}, each about 60 s then 60 s healed; then reads; its checker
counts lost elements (acknowledged, absent from the final read) and unexpected ones (read, never
attempted). Each row here is one `harness run --cluster patroni` with that fault set
(`--nemesis-interval 60`), and gives both judgments: the suite's own, computed from the history
as its checker would, and ours (every checker: the set checker's lost, stale and never-read
elements, and with the other workloads list-append and bank; split-brain; the leader key and
timelines). And what the suite does not measure: how long a primary cut off from etcd alone kept
acknowledging writes, and how long after a kill of the primary the next write was acknowledged
(Patroni's own acceptance tests expect a promotion within 32 s at the default 30 s TTL).

    nohup .venv/bin/python bench/patroni.py [--time 1800] [--configs suite,suite-off,…]
        [--seeds 0] [--until HH:MM] > patroni.log 2>&1 &
    .venv/bin/python bench/patroni.py --table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from run_rows import (
    anomalies,
    bench_configs,
    checked_run,
    coordinators_of,
    cut_off_acks,
    kill_to_write,
    rows_options,
    run_row,
    suite_judgment,
)

HARNESS = Path(sys.executable).parent / "harness"
SUITE_FAULTS = "partition-halves,partition-ring,partition-one,switchover,kill-postgres,kill-patroni"
# the suite's faults, and the primary cut off from etcd alone and every etcd server killed
WIDER_FAULTS = f"{SUITE_FAULTS},partition-dcs,kill-primary,kill-dcs"
# name → (--patroni-sync, --workload, --nemesis, --cancel-after s or None, --rate)
CONFIGS: dict[str, tuple[str, str, str, float | None, float]] = {
    "suite": ("quorum", "set", SUITE_FAULTS, None, 50),  # as Patroni runs it: quorum, strict
    "suite-cancel": ("quorum", "set", SUITE_FAULTS, 1.0, 50),  # patroni#1412's clients
    "suite-off": ("off", "set", SUITE_FAULTS, None, 50),  # asynchronous, Patroni's default
    "suite-on": ("on", "set", SUITE_FAULTS, None, 50),  # synchronous_mode, strict
    "suite-on-cancel": ("on", "set", SUITE_FAULTS, 1.0, 50),
    "wider-off": ("off", "set,append,bank", WIDER_FAULTS, None, 100),
    "wider-on": ("on", "set,append,bank", WIDER_FAULTS, None, 100),
    "wider-quorum": ("quorum", "set,append,bank", WIDER_FAULTS, None, 100),
    # failover time at Patroni's default TTL, beside the 32 s its acceptance tests expect
    "failover-on": ("on", "set", "kill-primary", None, 50),
    "failover-quorum": ("quorum", "set", "kill-primary", None, 50),
    # the primary cut off from etcd alone, its clients and replicas kept: how long it goes on
    # acknowledging (failsafe mode keeps a primary that reaches every member)
    "cut-dcs-off": ("off", "set", "partition-dcs", None, 50),
    "cut-dcs-quorum": ("quorum", "set", "partition-dcs", None, 50),
    # asynchronous replication's loss at a failover, named (the expected control)
    "loss-off": ("off", "set,append", "replication-kill", None, 50),
}
COLUMNS = (
    ("config", "config"),
    ("sync", "sync"),
    ("workloads", "workloads"),
    ("cancel_after", "cancel s"),
    ("seed", "seed"),
    ("seconds", "s"),
    ("suite_lost", "suite: lost"),
    ("suite_unexpected", "suite: unexpected"),
    ("verdict", "ours"),
    ("anomalies", "our anomalies"),
    ("kill_to_write_s", "kill → write s (worst)"),
    ("cut_off_acks_s", "cut off from etcd, acks for s (worst)"),
    ("failovers", "takeovers"),
    ("writes_per_s", "writes/s"),
    ("minutes", "run min"),
)


def run_one(config: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    sync, workloads, faults, cancel, rate = CONFIGS[config]
    cmd = [
        str(HARNESS), "run", "--cluster", "patroni", "--patroni-sync", sync,
        "--workload", workloads, "--nemesis", faults, "--nemesis-interval", "60",
        "--time", str(args.time), "--seed", str(seed), "--rate", str(rate),
        "--op-timeout", "5",
    ]  # fmt: skip
    if cancel is not None:
        cmd += ["--cancel-after", str(cancel)]
    keys = {
        "config": config,
        "seed": seed,
        "sync": sync,
        "workloads": workloads,
        "cancel_after": cancel,
        "seconds": args.time,
    }
    return run_row(cmd, args.store, f"patroni-{config}-s{seed}", keys, read_run)


def read_run(run: Path) -> dict[str, Any]:
    """What a row shows of a checked run folder."""
    results, history, checkers = checked_run(run)
    availability = checkers.get("availability") or {}
    state = checkers.get("cluster-state") or {}
    status = json.loads((run / "nodes" / "cluster-status.json").read_text())
    coordinators = coordinators_of(status)
    per_s = availability.get("acked_writes_per_s")
    return suite_judgment(history) | {
        "verdict": results.get("verdict"),
        "anomalies": "; ".join(anomalies(results)) or "none",
        "kill_to_write_s": kill_to_write(history),
        "cut_off_acks_s": cut_off_acks(history, coordinators),
        "failovers": len(state.get("takeovers") or []),
        "writes_per_s": None if per_s is None else round(per_s, 1),
    }


def said(row: dict[str, Any]) -> str:
    """The progress line of a row."""
    return f"{row['verdict']}: suite lost {row.get('suite_lost')}, ours {row.get('anomalies')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", type=float, default=1800.0, help="seconds of each run")
    parser.add_argument("--configs", default="suite,suite-off", help=", ".join(CONFIGS))
    parser.add_argument("--seeds", default="0")
    rows_options(parser, "patroni")
    args = parser.parse_args()
    return bench_configs(parser, args, CONFIGS, COLUMNS, run_one, said)


if __name__ == "__main__":
    sys.exit(main())
