"""bench/repmgr.py: every configuration is a run the harness takes (the kind's options and fault
packages it names are its own), and what a row reads of a run's stretches and faults."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from repmgr import CONFIGS, restarts, two_writable_s

import nemesis
from clusters.kinds.repmgr import RepmgrCluster


def test_every_configuration_is_a_run_the_harness_takes() -> None:
    flags = {o.flag: o for o in RepmgrCluster.cli_options}
    assert len(CONFIGS) == 12  # three fencings × two replications × with and without a witness
    for options, faults in CONFIGS.values():
        pairs = zip(options[::2], options[1::2], strict=True)
        given = {flags[f].name: flags[f].type(v) for f, v in pairs}
        checked = RepmgrCluster.checked_options(given)
        nemesis.validate(
            faults.split(","),
            RepmgrCluster.nodes_needed(checked),
            "repmgr",
            RepmgrCluster.coordinated_with(checked),
            RepmgrCluster,
        )


def test_two_writable_seconds_count_stretches_of_two_leaders_to_the_run_end() -> None:
    leaders = [
        {"start": 0.0, "end": 10.0, "nodes": ["n1"]},
        {"start": 10.0, "end": 14.5, "nodes": ["n1", "n2"]},
        {"start": 14.5, "end": 20.0, "nodes": ["n2"]},
        {"start": 20.0, "end": None, "nodes": ["n1", "n2"]},
    ]
    assert two_writable_s(leaders, 26.0) == 4.5 + 6.0


def test_restarts_count_those_after_a_promotion() -> None:
    def info(value: dict) -> dict:
        return {"process": "nemesis", "type": "info", "f": "start-restart-deposed", "value": value}

    history = [
        info({"deposed": "n1", "promoted": "n2"}),
        info({"deposed": "n2", "promoted": None}),
        info({"deposed": None, "why": "no node takes writes"}),
    ]
    assert restarts(history) == "2 (1)"
