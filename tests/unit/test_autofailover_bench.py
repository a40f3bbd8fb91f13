"""bench/autofailover.py: every configuration is a run the harness takes (the kind's options and
fault packages it names are its own)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from autofailover import CHAINS, CONFIGS

import nemesis
from clusters.kinds.autofailover import AutofailoverCluster
from nemesis.aimed import Aimed


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


def test_every_aimed_configuration_has_chains_the_kind_can_strike() -> None:
    aimed = {name for name, (_, _, _, faults) in CONFIGS.items() if "aimed" in faults.split(",")}
    assert aimed and aimed == set(CHAINS)
    for chains in CHAINS.values():
        for spec in chains:
            fault = Aimed.of_spec(spec, AutofailoverCluster.moments)
            assert fault.spec()["moment"] == spec["moment"]
            assert [s["moment"] for s in fault.spec()["then"]] == [
                s["moment"] for s in spec.get("then", [])
            ]
