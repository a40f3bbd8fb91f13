"""A real matrix: two short runs on the single-node cluster in Docker, checked and gated by one
command, then gated again from the store by `harness gate` (about a minute)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.e2e.conftest import harness

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

MATRIX = """
[run]
cluster = "single"
workload = "set"
time = 5
rate = 20
settle = 1

[matrix]
seeds = [0, 1]
"""


def seeds_of(junit: Path) -> dict[str, str]:
    cases = ET.parse(junit).getroot().iter("testcase")
    return {
        case.get("name", ""): next(
            p.get("value") for p in case.iter("property") if p.get("name") == "seed"
        )
        for case in cases
    }


def test_a_matrix_runs_checks_and_gates_in_one_command(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    store, junit = tmp_path / "results", tmp_path / "junit.xml"
    result = harness(
        "run", "--matrix", str(matrix), "--store", str(store), "--junit", str(junit), timeout=400
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "run 1 of 2" in out and "run 2 of 2" in out and "2 valid" in out
    seeds = seeds_of(junit)
    assert sorted(seeds.values()) == ["0", "1"], seeds
    assert all(name.startswith("single-set-none/") for name in seeds)
    assert (store / "latest" / "report.html").exists()

    again = harness("gate", str(store), "--junit", str(tmp_path / "again.xml"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert seeds_of(tmp_path / "again.xml") == seeds
