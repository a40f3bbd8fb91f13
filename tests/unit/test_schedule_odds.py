"""bench/schedule_odds.py: the faults it counts are those a run of that length starts, as the
schedule a run plans them, each named by what it aims at."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import nemesis
from clusters.kinds.safekeeper import SafekeeperCluster
from nemesis.aimed import Aimed
from nemesis.schedule import plan
from nemesis.seed001 import Seed001

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from schedule_odds import kind_options, label, met, odds

NODES = [f"n{i}" for i in range(1, 6)]


def test_a_fault_is_named_by_its_package_and_what_it_aims_at() -> None:
    rng = random.Random(3)
    assert label(Seed001.planned(NODES, rng)) in {
        "partition (seed001, serving)",
        "partition (seed001, fresh)",
    }
    rng = random.Random(1)
    aimed = [Aimed.planned(NODES, rng, SafekeeperCluster.moments) for _ in range(20)]
    moments = [f for f in aimed if isinstance(f, Aimed)]
    assert moments and all(label(f) == f"aimed ({f.moment.name})" for f in moments)


def test_a_run_meets_the_faults_its_schedule_starts_within_its_time() -> None:
    packages = nemesis.packages(["kill", "pause"], 5)
    steps, t = [], 0.0
    for step in plan(packages, NODES, 7, 10.0):
        t += step.gap
        if t >= 120:
            break
        steps.append(label(step.fault))
        t += step.duration
    assert met(packages, NODES, 7, 120, 10.0) == steps and len(steps) >= 3
    assert met(packages, NODES, 7, 0.1, 10.0) == []  # the first gap is at least 5 s


def test_the_odds_cover_the_kind_s_aimed_scenarios_and_grow_with_the_run() -> None:
    runs, per_run = odds("safekeeper", {}, ["all"], 120, 10.0, 60, True)
    assert "partition (seed001, fresh)" in runs or "partition (seed001, serving)" in runs
    assert any(name.startswith("aimed (") for name in runs)
    assert all(0 < n <= 60 for n in runs.values())
    longer, more = odds("safekeeper", {}, ["all"], 600, 10.0, 60, True)
    assert more > 4 * per_run and sum(longer.values()) > sum(runs.values())


def test_the_kind_s_options_are_read_as_harness_run_takes_them() -> None:
    assert kind_options("--mode confirm-rollback --safekeepers 5") == {
        "mode": "confirm-rollback",
        "safekeepers": 5,
    }
