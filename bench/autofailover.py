"""pg_auto_failover's own test suite's configurations, run with histories, and the scenarios its
code suggests, each one `harness run --cluster autofailover` whose row gives the verdict, the
lost and stale elements, how long after a kill of the primary the next write was acknowledged
(beside the documented 20 s unhealthy timeout and 30 s primary_demote_timeout), and how long a
primary cut off from the monitor went on acknowledging.

Its suite (tests/test_basic_operation.py, test_multi_standbys.py and others, 2.0) brings up two
and three nodes, quorum standbys and priority-0 members, takes a node's interface down (`ifdown`)
and checks that the formation comes back: never what the clients were told. Here `ifdown` is a
partition of the node alone (`partition-one` draws which; `partition-primary` cuts the primary).

    nohup .venv/bin/python bench/autofailover.py [--time 600] [--configs suite-3,…]
        [--seeds 0] [--until HH:MM] > autofailover.log 2>&1 &
    .venv/bin/python bench/autofailover.py --table
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
ROWS = Path(__file__).resolve().parent / "autofailover_rows.jsonl"  # kept with the project
IFDOWN = "partition-primary,partition-one,kill-primary"
# name → (what the suite or the scenario is, the kind's options, --workload, --nemesis)
CONFIGS: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "suite-2": ("two nodes, ifdown", ("--members", "2"), "set", IFDOWN),
    "suite-3": ("three nodes, two quorum standbys, ifdown", (), "set", IFDOWN),
    "suite-3-prio0": (
        "three nodes, one never promoted (priority 0)",
        ("--candidate-priority", "n3=0"),
        "set",
        IFDOWN,
    ),
    "suite-3-monitor": (
        "three nodes, the monitor cut off, killed or paused",
        (),
        "set",
        "partition-dcs,kill-dcs,pause-dcs,partition-one",
    ),
    "suite-3-wider": (
        "three nodes, every fault",
        (),
        "set,append,bank",
        "all",
    ),
    # the scenarios read from its code
    "async-standby": (
        "a primary that still streams to an asynchronous priority-0 standby while cut off",
        ("--candidate-priority", "n3=0", "--replication-quorum", "n3=false"),
        "set,append",
        "partition-unpromotable,kill-primary",
    ),
    "prio0-standby": (
        "a primary that still streams to a priority-0 quorum standby while cut off",
        ("--candidate-priority", "n3=0"),
        "set,append",
        "partition-unpromotable,kill-primary",
    ),
    "wait-primary": (
        "two nodes: the standby lost (wait_primary, acknowledging alone), then the primary",
        ("--members", "2"),
        "set,append",
        "partition-one,kill-primary,composite",
    ),
    "switchover": ("planned switchovers among kills", (), "set", "switchover,kill-primary"),
    # the same scenarios as aimed faults at the monitor's moments (CHAINS below)
    "aimed-wait-primary": (
        "two nodes: the standby cut off until the primary runs in wait_primary, then the primary "
        "killed; then, if the monitor promotes, the deposed primary restarted",
        ("--members", "2"),
        "set,append",
        "aimed",
    ),
    "aimed-promotion": (
        "the primary cut off; the standby being promoted killed as the old primary comes back",
        (),
        "set,append",
        "aimed",
    ),
    "aimed-catching-up": (
        "a standby cut off and let back; the primary cut off while it catches up",
        (),
        "set,append",
        "aimed",
    ),
    # the expected control: asynchronous standbys, a failover loses what the primary acknowledged
    "loss-async": (
        "every standby asynchronous, the primary cut off and killed",
        ("--replication-quorum", "n2=false,n3=false", "--number-sync-standbys", "0"),
        "set,append",
        "replication-kill",
    ),
}
# The aimed configurations' chains (`harness run --chains`), as `Aimed.spec` writes them. A
# follower's cut outlasts the monitor's unhealthy timeout (20 s), so the monitor notices it.
CHAINS: dict[str, list[dict[str, Any]]] = {
    "aimed-wait-primary": [{
        "moment": "wait-primary", "roles": ["leader"], "provocation": "partition",
        "strike": "kill", "delay": 0.5, "cut": 45.0, "hold": 60.0,
        "then": [{"moment": "promotion-assigned", "strike": "restart", "order": 0.4}],
    }],
    "aimed-promotion": [{
        "moment": "promotion-assigned", "roles": ["new-leader"], "provocation": "partition",
        "strike": "kill", "delay": 0.5, "release": True,
    }],
    "aimed-catching-up": [{
        "moment": "catching-up", "roles": ["leader"], "provocation": "partition",
        "strike": "partition", "delay": 0.2, "cut": 30.0,
    }],
}  # fmt: skip
COLUMNS = (
    ("config", "config"),
    ("about", "what"),
    ("seed", "seed"),
    ("seconds", "s"),
    ("suite_lost", "lost"),
    ("suite_unexpected", "unexpected"),
    ("verdict", "ours"),
    ("anomalies", "our anomalies"),
    ("kill_to_write_s", "kill → write s (worst)"),
    ("cut_off_acks_s", "cut off from the monitor, acks for s (worst)"),
    ("failovers", "takeovers"),
    ("writes_per_s", "writes/s"),
    ("minutes", "run min"),
)


def run_one(config: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    about, options, workloads, faults = CONFIGS[config]
    cmd = [
        str(HARNESS), "run", "--cluster", "autofailover", *options,
        "--partition-timeout", str(args.partition_timeout), "--workload", workloads,
        "--nemesis", faults, "--time", str(args.time), "--seed", str(seed), "--rate", "50",
    ]  # fmt: skip
    if config in CHAINS:
        chains = args.store / f"chains-{config}.json"
        chains.parent.mkdir(parents=True, exist_ok=True)
        chains.write_text(json.dumps(CHAINS[config]))
        cmd += ["--chains", str(chains)]
    keys = {"config": config, "about": about, "seed": seed, "seconds": args.time}
    return run_row(cmd, args.store, f"autofailover-{config}-s{seed}", keys, read_run)


def read_run(run: Path) -> dict[str, Any]:
    """What a row shows of a checked run folder."""
    results, history, checkers = checked_run(run)
    state = checkers.get("cluster-state") or {}
    per_s = (checkers.get("availability") or {}).get("acked_writes_per_s")
    status = json.loads((run / "nodes" / "cluster-status.json").read_text())
    return suite_judgment(history) | {
        "verdict": results.get("verdict"),
        "anomalies": "; ".join(anomalies(results)) or "none",
        "kill_to_write_s": kill_to_write(history),
        "cut_off_acks_s": cut_off_acks(history, coordinators_of(status)),
        "failovers": len(state.get("takeovers") or []),
        "writes_per_s": None if per_s is None else round(per_s, 1),
    }


def said(row: dict[str, Any]) -> str:
    """The progress line of a row."""
    return f"{row['verdict']}: lost {row.get('suite_lost')}, {row.get('anomalies')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", type=float, default=600.0, help="seconds of each run")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=", ".join(CONFIGS))
    parser.add_argument("--seeds", default="0")
    parser.add_argument(
        "--partition-timeout",
        type=int,
        default=20,
        help="the kind's --partition-timeout (default 20, pg_auto_failover's own timescale)",
    )
    rows_options(
        parser, "autofailover", Path(__file__).resolve().parent / "autofailover_rows.jsonl"
    )
    args = parser.parse_args()
    return bench_configs(parser, args, CONFIGS, COLUMNS, run_one, said)


if __name__ == "__main__":
    sys.exit(main())
