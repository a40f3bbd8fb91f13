"""bench/autofailover.py: every configuration is a run the harness takes (the kind's options and
fault packages it names are its own)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from autofailover import CONFIGS

import nemesis
from clusters.kinds.autofailover import AutofailoverCluster


def test_every_configuration_is_a_run_the_harness_takes() -> None:
    flags = {o.flag: o for o in AutofailoverCluster.cli_options}
    for _, options, workloads, faults in CONFIGS.values():
        given = {}
        for flag, value in zip(options[::2], options[1::2], strict=True):
            option = flags[flag]
            given[option.name] = option.type(value)
        checked = AutofailoverCluster.checked_options(given)
        nodes = AutofailoverCluster.nodes_needed(checked)
        nemesis.validate(
            faults.split(","), nodes, "autofailover", coordinated=True, kind=AutofailoverCluster
        )
        assert set(workloads.split(",")) <= {"set", "append", "bank"}
