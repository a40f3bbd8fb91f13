"""`harness run --matrix/--test-count`: what runs a file describes, and how many runs are gated.

The runs themselves are stood in for by run folders written by hand (a cluster takes minutes);
their checks, the index and the gate are the real ones."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from io import StringIO
from pathlib import Path
from typing import Any

import click
import pytest
from pyspark.sql import SparkSession
from rich.console import Console

import harness.runner
from core.errors import BadInput, InfraError
from harness.cli import run as run_command
from harness.cli import run_config
from harness.matrix import expand, repeat, run_many
from harness.runner import RunResult
from tests.runs_store import make_run


def expanded(tmp_path: Path, text: str, *args: str) -> list[dict[str, Any]]:
    """The runs of a matrix file, with `args` on the command line."""
    ctx = run_command.make_context("run", list(args))
    base = {k: v for k, v in ctx.params.items() if k not in ("test_count", "matrix", "junit")}
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return expand(path, base, run_command, ctx)


MATRIX = """
[run]
cluster = "safekeeper"
time = 5

[matrix]
workloads = ["set", ["bank", "append"]]
nemeses = ["none", "kill"]
modes = ["safekeeper", "confirm-rollback"]
seeds = [0, 1]

[[include]]
workload = "append"
nemesis = "partition-primary"
bug = ["accept-lower-term", "deposed-primary-serves"]
"""


def test_a_matrix_is_every_combination_then_the_includes(tmp_path: Path) -> None:
    runs = expanded(tmp_path, MATRIX, "--cluster", "single", "--time", "60", "--rate", "7")
    assert len(runs) == 2 * 2 * 2 * 2 + 1
    picked = [(r["workloads"], r["nemesis"], r["mode"], r["seed"]) for r in runs]
    assert picked[:3] == [
        ("set", "none", "safekeeper", 0),
        ("set", "none", "safekeeper", 1),
        ("set", "none", "confirm-rollback", 0),
    ]
    assert picked[-2] == ("bank,append", "kill", "confirm-rollback", 1)
    assert {r["cluster"] for r in runs} == {"safekeeper"}  # [run] over the command line
    assert {r["time_limit"] for r in runs} == {5.0}  # converted as the option converts it
    assert {r["rate"] for r in runs} == {7.0}  # the command line where the file is silent
    include = runs[-1]
    assert (include["workloads"], include["nemesis"], include["bug"]) == (
        "append",
        "partition-primary",
        "accept-lower-term,deposed-primary-serves",
    )
    assert include["mode"] is None and include["seed"] == 0
    configs = [run_config(dict(r)) for r in runs]
    assert configs[-1].cluster_options == {"bug": "accept-lower-term,deposed-primary-serves"}
    assert configs[2].cluster_options == {"mode": "confirm-rollback"}


def test_no_matrix_is_one_run_and_only_includes_are_the_includes(tmp_path: Path) -> None:
    assert [r["seed"] for r in expanded(tmp_path, "[run]\nseed = 4\n")] == [4]
    runs = expanded(tmp_path, '[[include]]\nworkload = "set"\n[[include]]\nworkload = "bank"\n')
    assert [r["workloads"] for r in runs] == ["set", "bank"]


def test_test_count_repeats_each_run_with_the_next_seeds() -> None:
    runs = repeat([{"seed": 5, "x": "a"}, {"seed": 0, "x": "b"}], 3)
    assert [(r["x"], r["seed"]) for r in runs] == [
        ("a", 5),
        ("a", 6),
        ("a", 7),
        ("b", 0),
        ("b", 1),
        ("b", 2),
    ]
    with pytest.raises(BadInput, match="--test-count"):
        repeat([{"seed": 0}], 0)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[run]\nspeed = 3\n", "'speed', which is no option of `harness run`"),
        ("[matrix]\nseeds = 3\n", "seeds must be a non-empty list"),
        ("[matrix]\nseeds = []\n", "seeds must be a non-empty list"),
        ('[run]\ntime = "soon"\n', "time = 'soon'"),
        ("[runs]\n", "unknown section runs"),
        ("[run\n", "is not valid TOML"),
        ("include = 3\n", "include must be an array of tables"),
        ("[run]\nmatrix = 'other.toml'\n", "'matrix', which is no option"),
    ],
)
def test_a_wrong_file_is_one_sentence(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(BadInput, match=r"matrix\.toml") as caught:
        expanded(tmp_path, text)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_bad_input(tmp_path: Path) -> None:
    ctx = run_command.make_context("run", [])
    with pytest.raises(BadInput, match="cannot read the matrix file"):
        expand(tmp_path / "none.toml", dict(ctx.params), run_command, ctx)


class FakeRunner:
    """Stands in for a run: writes the run folder a run of this seed would leave. Seed 1 loses
    an acknowledged add; seed 2's cluster fails once its folder exists."""

    def __init__(self, cfg: Any, console: Console) -> None:
        self.cfg = cfg
        self.run_dir: Path | None = None

    def run(self) -> RunResult:
        stamp = f"20261121T1000{self.cfg.seed:02d}"
        self.run_dir = make_run(self.cfg.store, self.cfg.test_name, stamp, lose=self.cfg.seed == 1)
        if self.cfg.seed == 2:
            raise InfraError("node n1 did not start")
        return RunResult(self.run_dir)


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch, spark: SparkSession) -> None:
    monkeypatch.setattr(harness.runner, "Runner", FakeRunner)


def configs(store: Path, count: int) -> list[Any]:
    ctx = run_command.make_context("run", ["--cluster", "single", "--workload", "set"])
    opts = {k: v for k, v in ctx.params.items() if k not in ("test_count", "matrix", "junit")}
    opts |= {"store": store, "spark_master": "local[2]"}
    return [run_config(dict(r)) for r in repeat([opts], count)]


def test_many_runs_are_checked_and_gated_by_the_worst(fake_runs: None, tmp_path: Path) -> None:
    out = StringIO()
    junit = tmp_path / "junit.xml"
    code = run_many(configs(tmp_path / "results", 3), junit, Console(file=out, width=200))
    text = out.getvalue()
    assert code == 255, text  # the failed run is worse than the anomaly
    assert "run 3 of 3" in text and "node n1 did not start" in text
    assert "1 valid" in text and "1 invalid" in text and "1 error" in text
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["single-set-none/20261121T100001"].find("failure").get("message") == "set: lost"
    assert cases["single-set-none/20261121T100002"].find("error").get("message") == (
        "node n1 did not start"
    )
    assert cases["single-set-none/20261121T100000"].find("failure") is None


def test_an_anomaly_is_exit_1(fake_runs: None, tmp_path: Path) -> None:
    code = run_many(configs(tmp_path / "results", 2), None, Console(file=StringIO()))
    assert code == 1


def test_every_run_is_validated_before_the_first_starts(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[run]\ncluster = "single"\n[matrix]\nmodes = ["confirm-rollback"]\n')
    ctx = run_command.make_context("run", [])
    runs = expand(path, dict(ctx.params), run_command, ctx)
    with pytest.raises(BadInput, match="--mode applies to --cluster safekeeper"):
        [run_config(dict(r)) for r in runs]


def test_the_run_command_takes_the_options() -> None:
    names = {p.name for p in run_command.params if isinstance(p, click.Option)}
    assert {"test_count", "matrix", "junit"} <= names
