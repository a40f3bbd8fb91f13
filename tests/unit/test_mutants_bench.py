"""bench/mutants.py: the mutants it makes are real one-place changes, its sample is stable, its
interval is the Wilson interval, and the copy it runs from is the one a run deploys and the
protocol tests import."""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import pytest

import systems

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from mutants import (
    SAFETY,
    Mutant,
    mutants_of,
    operators,
    options_of,
    patch_with,
    protocol_tests,
    same_as,
    sample,
    score,
    side_by_side,
    tree_with,
    wilson,
)
from run_rows import cell, read_rows, until_time, work_through

TERMHISTORY = "walkeeper/termhistory.py"


def test_every_safety_file_has_mutants_that_each_change_one_place() -> None:
    names = operators()
    for file in SAFETY:
        found = mutants_of(file, names)
        assert found, file
    original = (systems.ROOT / TERMHISTORY).read_text()
    for mutant in mutants_of(TERMHISTORY, names):
        changed = mutant.mutated()
        assert changed != original
        ast.parse(changed)  # still Python
        differing = [
            i + 1
            for i, (a, b) in enumerate(
                zip(original.splitlines(), changed.splitlines(), strict=True)
            )
            if a != b
        ]
        assert differing and differing[0] == mutant.line, mutant.key
        assert "→" in mutant.change()


def test_the_quorum_mutant_reads_as_its_change() -> None:
    found = [
        m
        for m in mutants_of(TERMHISTORY, operators())
        if "quorum = total // 2 + 1"
        in (systems.ROOT / TERMHISTORY).read_text().splitlines()[m.line - 1]
        and m.operator.endswith("ReplaceBinaryOperator_Add_Sub")
    ]
    assert len(found) == 1
    assert found[0].change() == "quorum = total // 2 + 1 → quorum = total // 2 - 1"


def test_a_mutant_of_patronis_ha_is_a_patch_the_kind_accepts(tmp_path: Path) -> None:
    """A module of Patroni's is read from the wheel the kind pins, and its mutant is laid out as
    `--patroni-patch` wants it, which the kind's own check of that option accepts."""
    from clusters.kinds.patroni import patch_problem

    mutant = mutants_of("patroni/ha.py", ["core/ReplaceComparisonOperator_Lt_LtE"])[0]
    folder = patch_with(mutant, tmp_path)
    assert [p.name for p in folder.iterdir()] == ["ha.py"]
    assert (folder / "ha.py").read_text() == mutant.mutated()
    assert "<=" in mutant.change().split(" → ")[1]
    assert patch_problem(str(folder)) is None
    assert options_of("patroni/ha.py")[:2] == ("--cluster", "patroni")


def test_a_sample_is_seeded_and_a_larger_one_holds_the_smaller() -> None:
    mutants = mutants_of(TERMHISTORY, operators())
    assert sample(mutants, 5, 1) == sample(list(reversed(mutants)), 5, 1)
    assert sample(mutants, 8, 1)[:5] == sample(mutants, 5, 1)
    assert sample(mutants, 5, 1) != sample(mutants, 5, 2)


def test_wilson_interval() -> None:
    low, high = wilson(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)
    low, high = wilson(0, 10)
    assert low == 0.0 and round(high, 3) == 0.278
    assert wilson(0, 0) == (0.0, 1.0)


def test_score_leaves_out_the_equivalent_and_counts_a_cluster_that_failed() -> None:
    rows = [
        {"key": "a", "caught": "run 1"},
        {"key": "b", "caught": "survived"},
        {"key": "c", "caught": "cluster failed"},
        {"key": "d", "caught": "survived"},
    ]
    line = score(rows, {"d": "changes a log line only"})
    assert line.startswith("caught 2 of 3 mutants: 67 %")
    assert "1 of them by a cluster that did not start" in line
    assert line.endswith("1 set apart as equivalent")


@pytest.fixture
def quorum_mutant() -> Mutant:
    (found,) = [
        m
        for m in mutants_of(TERMHISTORY, operators())
        if m.change() == "quorum = total // 2 + 1 → quorum = total // 2 - 1"
    ]
    return found


def test_the_copy_is_what_a_run_deploys_and_the_protocol_tests_catch_its_mutant(
    quorum_mutant: Mutant, tmp_path: Path
) -> None:
    """tree_with probes that the harness would import the copy; the protocol tests, run against
    it, fail on a quorum of one less than a majority (and pass on the unmutated code, run the
    same way with the same copy made of an operator that applies nowhere)."""
    root = tree_with(quorum_mutant, tmp_path)
    assert "total // 2 - 1" in (root / "systems" / TERMHISTORY).read_text()
    assert protocol_tests(root) == "fail"
    (root / "systems" / TERMHISTORY).write_text((systems.ROOT / TERMHISTORY).read_text())
    assert protocol_tests(root) == "pass"


def test_a_sitting_past_until_begins_no_row_and_the_same_plan_resumes(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    made: list[int] = []

    def make(n: int) -> dict[str, int]:
        made.append(n)
        return {"n": n}

    plan = [(1,), (2,), (3,)]
    work_through(rows, plan, lambda r: (r["n"],), make, str, until=0.0)
    assert made == [] and read_rows(rows) == []
    work_through(rows, plan[:1], lambda r: (r["n"],), make, str)
    work_through(rows, plan, lambda r: (r["n"],), make, str, until=until_time("23:59") + 60)
    assert made == [1, 2, 3] and [r["n"] for r in read_rows(rows)] == [1, 2, 3]
    with pytest.raises(argparse.ArgumentTypeError, match="no time of day"):
        until_time("25:00")


def test_a_cell_of_the_table_is_one_line_with_its_bars_escaped() -> None:
    said = "connection failed: server closed the connection\n        This | that"
    assert cell(said) == "connection failed: server closed the connection This \\| that"


def test_a_mutant_of_earlier_rows_is_found_again_after_its_file_changed_elsewhere() -> None:
    """An edit elsewhere in a file changes a mutant's key (the file's digest), and may move its
    line and occurrence; `--same-as` finds it by what it changes, and says which it cannot."""
    names = operators()
    mutant = mutants_of(TERMHISTORY, names)[5]
    earlier = {
        "file": mutant.file, "operator": mutant.operator, "line": mutant.line + 7,
        "key": f"{mutant.file}@0000000000:{mutant.operator}:{mutant.occurrence + 3}",
        "change": mutant.change(),
    }  # fmt: skip
    edited = earlier | {"key": "edited", "change": "a line no longer there → another"}
    found, gone = same_as([earlier, edited], names)
    assert found == [mutant] and gone == ["edited"]
    equivalent = {earlier["key"]: "why"}
    row = {"key": mutant.key, "was": earlier["key"], "caught": "survived"}
    assert score([row], equivalent).endswith("1 set apart as equivalent")


def test_two_strategies_on_the_same_mutants_stand_side_by_side() -> None:
    def row(key: str, strategy: str, caught: str, **more: object) -> dict[str, object]:
        return {"key": key, "file": "f.py", "line": 1, "change": f"{key} → x",
                "strategy": strategy, "caught": caught} | more  # fmt: skip

    explore = [row("a", "explore", "run 2", minutes_to_catch=3.5, by="set lost"),
               row("b", "explore", "survived"), row("c", "explore", "survived")]  # fmt: skip
    every = [row("a", "all", "survived"), row("b", "all", "survived")]
    third = [row("b", "explore-all", "run 1", minutes_to_catch=2.0, by="lost")]
    text = side_by_side([explore, every, third], {"c": "the branch is never taken"})
    assert text.splitlines()[0].startswith("explore: caught 1 of 2 mutants")
    assert text.splitlines()[1].startswith("all: caught 0 of 2 mutants")
    assert text.splitlines()[2].startswith("explore-all: caught 1 of 1 mutants")
    assert "run under every one: 1" in text
    line_a = next(line for line in text.splitlines() if "a → x" in line)
    assert "caught in 3.5 min: set lost" in line_a and "survived" in line_a
    assert line_a.rstrip(" |").endswith("not run")
    line_c = next(line for line in text.splitlines() if "c → x" in line)
    assert line_c.count("equivalent: the branch is never taken") == 3
