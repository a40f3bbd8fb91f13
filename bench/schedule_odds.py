"""How often a run meets each fault its nemesis can draw. The schedule is drawn from the seed
alone (nemesis.schedule.plan), so the share of seeds whose first `--time` seconds start a fault
is the chance that a run of that length meets it, and 1 - (1 - p)^k that one of k runs does: the
odds of a score measured in k runs catching a bug that only one fault shows. No cluster starts:
the schedule is planned as `harness run` plans it, for the kind's nodes, moments and links.

    .venv/bin/python bench/schedule_odds.py [--cluster safekeeper] [--options "--mode
        confirm-rollback"] [--nemesis all] [--time 120] [--runs 2] [--seeds 1000]

A fault is named by its package and what it is aimed at: its moment, shape, tail or target
(`aimed (term-won)`, `partition (seed001, fresh)`, `kill (primaries)`); a fault nested in
another counts too.
"""

from __future__ import annotations

import argparse
import shlex
from collections import Counter
from typing import Any

import nemesis
from clusters.registry import cluster_kind
from nemesis.schedule import plan

NAMED_BY = ("moment", "shape", "tail", "target")  # what of a fault's plan tells it apart


def label(fault: Any) -> str:
    """A fault's package and what it aims at, from its plan."""
    planned = fault.plan()
    aims = ", ".join(str(planned[k]) for k in NAMED_BY if planned.get(k) is not None)
    return f"{planned['fault']} ({aims})" if aims else str(planned["fault"])


def met(packages: list[Any], nodes: list[str], seed: int, time: float, interval: float) -> list:
    """The faults a run of `time` seconds with this seed starts, in order, nested ones too."""
    started, t = [], 0.0
    for step in plan(packages, nodes, seed, interval):
        t += step.gap
        if t >= time:
            return started
        started.append(label(step.fault))
        if step.inner is not None and t + step.inner.after < time:
            started.append(label(step.inner.fault))
        t += step.duration
    return started


def odds(
    cluster: str,
    given: dict[str, Any],
    names: list[str],
    time: float,
    interval: float,
    seeds: int,
    power: bool,
) -> tuple[Counter, float]:
    """How many of `seeds` runs meet each fault, and how many faults a run starts on average."""
    kind = cluster_kind(cluster)
    options = kind.checked_options(given)
    count = kind.nodes_needed(options)
    coordinated = kind.coordinated_with(options)
    nemesis.validate(names, count, cluster, coordinated, kind)
    links = tuple(link.name for link in kind.links)
    packages = nemesis.packages(
        names, count, power, coordinated, kind.moments_of(options), kind=kind, links=links
    )
    nodes = [f"n{i}" for i in range(1, count + 1)]
    runs: Counter = Counter()
    faults = 0
    for seed in range(seeds):
        started = met(packages, nodes, seed, time, interval)
        runs.update(set(started))
        faults += len(started)
    return runs, faults / seeds


def kind_options(text: str) -> dict[str, Any]:
    """`--options`' kind options (`--mode confirm-rollback --safekeepers 5`) as keywords."""
    words = shlex.split(text)
    given: dict[str, Any] = {}
    for flag, value in zip(words[::2], words[1::2], strict=False):
        key = flag.removeprefix("--").replace("-", "_")
        given[key] = int(value) if value.isdigit() else value
    return given


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", default="safekeeper")
    parser.add_argument(
        "--options", default="", help="the kind's options, as `harness run` takes them"
    )
    parser.add_argument("--nemesis", default="all")
    parser.add_argument("--time", type=float, default=120.0, help="seconds of each run")
    parser.add_argument("--interval", type=float, default=10.0, help="--nemesis-interval")
    parser.add_argument(
        "--runs", type=int, default=2, help="runs of a measure (a score's two seeds)"
    )
    parser.add_argument("--seeds", type=int, default=1000, help="seeds drawn")
    parser.add_argument("--no-power", action="store_true", help="a backend without the power layer")
    args = parser.parse_args()
    runs, per_run = odds(
        args.cluster,
        kind_options(args.options),
        args.nemesis.split(","),
        args.time,
        args.interval,
        args.seeds,
        not args.no_power,
    )
    print(
        f"{args.cluster} {args.options or ''} --nemesis {args.nemesis} --time {args.time:g}: "
        f"{per_run:.1f} faults a run, over seeds 0–{args.seeds - 1}\n"
    )
    print(f"| fault | runs that meet it | at least once in {args.runs} runs |")
    print("|---|---|---|")
    for name, n in sorted(runs.items(), key=lambda item: (-item[1], item[0])):
        p = n / args.seeds
        print(f"| {name} | {p:.0%} | {1 - (1 - p) ** args.runs:.0%} |")


if __name__ == "__main__":
    main()
