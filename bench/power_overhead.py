"""What the power layer costs: commit latency and throughput of the safekeeper cluster with every
node's state on powerfs (the layer in place, no fault) against the same cluster without it.

Both clusters (one compute, three safekeepers each) are up at once and the runs alternate
between them, so that load from elsewhere falls on both alike; the measurement is
`commit_latency.py`'s (autocommit INSERTs of one row: each commit waits for the quorum, whose
safekeepers fdatasync their WAL, and Postgres fsyncs its own). The goal: p50 at most 1.3x.

    .venv/bin/python bench/power_overhead.py [--time 20] [--rounds 3] [--throughput-clients 8]
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections.abc import Callable

from commit_latency import Target, drive, interrupted, prepare

from clusters.docker_backend import DockerBackend
from clusters.kinds.safekeeper import SafekeeperCluster

GOAL = 1.3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=float, default=20, help="seconds counted per run")
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--latency-clients", type=int, default=1)
    parser.add_argument("--throughput-clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupted)
    stamp = f"{time.strftime('%Y%m%dt%H%M%S')}-{os.getpid()}"
    plain = Target("without the layer", f"bench-power-off-{stamp}")
    layered = Target("on powerfs", f"bench-power-on-{stamp}")
    backends = {plain.cluster: DockerBackend(), layered.cluster: DockerBackend(power=True)}
    up: list[str] = []

    def say(cluster: str) -> Callable[[str], None]:
        return lambda m: print(f"[{cluster}] {m}", file=sys.stderr, flush=True)

    try:
        for target in (plain, layered):
            backend = backends[target.cluster]
            up.append(target.cluster)
            kind = SafekeeperCluster(backend, target.cluster, {"computes": 1})
            kind.deploy(say(target.cluster))
            for node in kind.nodes:
                if backend.power:
                    node.sync_power()
            prepare(target, kind.computes()[0])
        for r in range(args.rounds):
            order = (plain, layered) if r % 2 == 0 else (layered, plain)
            for phase, clients in (
                ("latency", args.latency_clients),
                ("throughput", args.throughput_clients),
            ):
                for target in order:
                    print(f"round {r + 1}/{args.rounds}: {target.label}, {clients} client(s)",
                          file=sys.stderr, flush=True)  # fmt: skip
                    run = drive(target.conninfo, clients, args.time, args.warmup)
                    if getattr(target, phase) is None:
                        setattr(target, phase, run)
                    else:
                        getattr(target, phase).add(run)
    finally:
        for cluster in reversed(up):
            print(f"[{cluster}] taking it down", file=sys.stderr, flush=True)
            backends[cluster].down(cluster)
    report(args, layered, plain)


def report(args: argparse.Namespace, layered: Target, plain: Target) -> None:
    tc = args.throughput_clients
    print(
        f"power layer overhead: safekeeper cluster (1 compute, 3 safekeepers), autocommit INSERT "
        f"of one row, {args.rounds} x {args.time:g} s per run, {os.cpu_count()} cores"
    )
    print(f"  {'':20}{'p50 ms':>9}{'p99 ms':>9}{f'tx/s @{tc}':>11}{f'p50 ms @{tc}':>12}")
    rows = []
    for t in (layered, plain):
        lat, thr = t.latency, t.throughput
        assert lat is not None and thr is not None
        row = (lat.quantile(0.5), lat.quantile(0.99), thr.rate, thr.quantile(0.5))
        rows.append(row)
        print(f"  {t.label:20}{row[0]:9.2f}{row[1]:9.2f}{row[2]:11.1f}{row[3]:12.2f}")
    ratios = [a / b if b else math.nan for a, b in zip(rows[0], rows[1], strict=True)]
    print(f"  {'ratio':20}{ratios[0]:9.2f}{ratios[1]:9.2f}{ratios[2]:11.2f}{ratios[3]:12.2f}")
    verdict = "holds" if ratios[0] <= GOAL else "does NOT hold"
    print(f"goal: p50 with the layer at most {GOAL:g}x without: {verdict} ({ratios[0]:.2f}x)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
