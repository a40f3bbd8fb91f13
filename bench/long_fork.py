"""The Long Fork search: runs of plain streaming replication with no fault at all, reads on the hot
standbys, append transactions at repeatable read, looking for the G-nonadjacent cycles Jepsen
found on RDS for PostgreSQL (2025): two independent commits seen in one order on a standby and in
the other on the primary (the primary makes commits visible in ProcArray order, a standby in WAL
order). The control reads from the primary and is expected clean.

Each row is one `harness run --cluster streaming --workload append --isolation repeatable-read
--nemesis none` with a configuration's knobs (where reads go, replication, rate, workers, the
pause between a transaction's statements), read back from its run folder: the verdict, the
G-nonadjacent cycles found and every other anomaly type, the first anomaly's time, and
operations per second. One cluster at a time: the figure is the point.

    nohup .venv/bin/python bench/long_fork.py [--time 1800] [--configs jepsen,control,…]
        [--seeds 0,1] [--until HH:MM] > long-fork.log 2>&1 &
    .venv/bin/python bench/long_fork.py --table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from run_rows import (
    anomalies,
    first_anomaly_s,
    read_rows,
    rows_options,
    run_row,
    table,
    work_through,
)

HARNESS = Path(sys.executable).parent / "harness"
# name → (--read-from, --replication, --rate, --concurrency, --op-pause ms)
# Jepsen's RDS test sent half its clients to the writer endpoint, whose read-only transactions
# ran on the primary, and half to the readers: `any` spreads the workers' reads over every node
# likewise, so that one order of two commits is seen on the primary and the other on a standby.
CONFIGS: dict[str, tuple[str, str, float, int, float]] = {
    "jepsen": ("any", "async", 100, 20, 10),  # Jepsen's knobs, as near as ours go
    "jepsen-sync": ("any", "sync", 100, 20, 10),
    "flat-out": ("any", "async", 0, 20, 10),  # unthrottled
    "flat-out-no-pause": ("any", "async", 0, 20, 0),
    "replicas": ("replicas", "async", 100, 20, 10),  # every read-only transaction on a standby
    "control": ("primary", "async", 100, 20, 10),  # every read on the primary: expected clean
    # n3 replays 2 s behind: its reads see older prefixes, which snapshot isolation without
    # real-time order allows (the control that must not cry wolf): expected valid
    "held-back": ("any", "async", 0, 20, 0),
    # At the load the harness reaches (bench/append_load.py's keys200-w40, about 400 committed a
    # second): many commits in flight at once, each a chance for the primary's visibility order
    # and the WAL's to differ. With quorum or sync replication, the commits that wait for a
    # standby's reply are released together when it comes, in an order of their own.
    "load": ("any", "async", 0, 40, 0),
    "load-quorum": ("any", "quorum", 0, 40, 0),
    "load-sync": ("any", "sync", 0, 40, 0),
    # ... and the standbys' WAL a few milliseconds late and uneven, as across a network
    # (Jepsen's clusters were machines apart; here a standby replays within a millisecond)
    "load-latency": ("any", "async", 0, 40, 0),
}
LOAD = ["--key-count", "200"]
EXTRA: dict[str, list[str]] = {
    "held-back": ["--apply-delay", "2000"],
    "load": LOAD,
    "load-quorum": LOAD,
    "load-sync": LOAD,
    "load-latency": LOAD,
}
# Configurations whose runs replay a schedule (`--schedule`, written into the store): a latency
# toxic on the streaming kind's `upstream` link (each standby's walreceiver to its primary), on
# the stream from the primary, for the whole run.
SCHEDULES: dict[str, dict[str, Any]] = {
    "load-latency": {
        "format": "harness-schedule",
        "version": 1,
        "cluster": "streaming",
        "faults": [
            {"start_s": 0.0, "stop_s": None,
             "plan": {"fault": "toxic", "target": "all", "targets": ["n1", "n2", "n3"],
                      "toxic": "latency", "stream": "downstream", "link": "upstream",
                      "attributes": {"latency": 3, "jitter": 3}}},
        ],
    },
}  # fmt: skip
COLUMNS = (
    ("config", "config"),
    ("read_from", "reads on"),
    ("replication", "replication"),
    ("rate", "rate"),
    ("concurrency", "workers"),
    ("op_pause", "pause ms"),
    ("extra", "more options"),
    ("seed", "seed"),
    ("seconds", "s"),
    ("verdict", "verdict"),
    ("nonadjacent", "G-nonadjacent"),
    ("anomalies", "anomalies"),
    ("first_anomaly_s", "first at s"),
    ("ops_per_s", "ok ops/s"),
    ("minutes", "run min"),
)


def run_one(config: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    read_from, replication, rate, concurrency, pause = CONFIGS[config]
    cmd = [
        str(HARNESS), "run", "--cluster", "streaming", "--workload", "append",
        "--isolation", "repeatable-read", "--nemesis", "none", "--time", str(args.time),
        "--seed", str(seed), "--read-from", read_from, "--replication", replication,
        "--rate", str(rate), "--concurrency", str(concurrency), "--op-pause", str(pause),
        *EXTRA.get(config, []),
    ]  # fmt: skip
    if config in SCHEDULES:
        schedule = args.store / f"{config}.schedule.json"
        schedule.parent.mkdir(parents=True, exist_ok=True)
        schedule.write_text(json.dumps(SCHEDULES[config]))
        cmd += ["--schedule", str(schedule)]
    keys = {
        "config": config,
        "seed": seed,
        "read_from": read_from,
        "replication": replication,
        "rate": rate,
        "concurrency": concurrency,
        "op_pause": pause,
        "extra": " ".join([*EXTRA.get(config, []), *scheduled(config)]),
        "seconds": args.time,
    }
    return run_row(cmd, args.store, f"long-fork-{config}-s{seed}", keys, read_run)


def scheduled(config: str) -> list[str]:
    """The configuration's schedule in words, for its row: each toxic, its amounts, its link."""
    faults = SCHEDULES.get(config, {}).get("faults", [])
    return [
        f"--schedule ({p['toxic']} {', '.join(f'{k} {v}' for k, v in p['attributes'].items())} "
        f"on {p['link']} {p['stream']})"
        for p in (f["plan"] for f in faults)
    ]


def read_run(run: Path) -> dict[str, Any]:
    """What a row shows of a checked run folder."""
    results = json.loads((run / "results.json").read_text())
    append = (results.get("checkers") or {}).get("append") or {}
    cycles = [a for a in append.get("anomalies") or [] if "nonadjacent" in str(a.get("type"))]
    stats = (results.get("checkers") or {}).get("stats") or {}
    ok_per_s = stats.get("ok_per_s")
    return {
        "verdict": results.get("verdict"),
        "nonadjacent": len(cycles),
        "anomalies": "; ".join(anomalies(results)) or "none",
        "first_anomaly_s": first_anomaly_s(results),
        "ops_per_s": None if ok_per_s is None else round(ok_per_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", type=float, default=600.0, help="seconds of each run (≤ 1800)")
    parser.add_argument("--configs", default="jepsen,control", help=", ".join(CONFIGS))
    parser.add_argument("--seeds", default="0")
    rows_options(parser, "long-fork")
    args = parser.parse_args()
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return 0
    if not 0 < args.time <= 1800:
        parser.error("--time is seconds of each run, at most 1800")
    configs = [c for c in args.configs.split(",") if c]
    if unknown := [c for c in configs if c not in CONFIGS]:
        parser.error(f"unknown config {unknown[0]!r}: choose from {', '.join(CONFIGS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    plan = [(c, s) for s in seeds for c in configs]
    work_through(
        args.rows,
        plan,
        lambda row: (row["config"], row["seed"]),
        lambda config, seed: run_one(config, seed, args),
        lambda row: (
            f"{row['verdict']}: {row.get('nonadjacent')} G-nonadjacent, "
            f"{row.get('anomalies')}, {row.get('ops_per_s')} ok/s"
        ),
        until=args.until,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
