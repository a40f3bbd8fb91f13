"""The release gate: the index of runs as a table, as JUnit XML, and as an exit code.

`harness gate RESULT_DIRS…` and the end of `harness run --test-count/--matrix` both come here. The
exit code is the worst verdict of the runs (DESIGN.md): an infrastructure error (a run that
crashed) over an anomaly over an undecided or unchecked run over valid.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from clusters.registry import CLUSTER_KINDS
from core import store
from core.errors import BadInput
from core.verdict import EXIT_INFRA
from harness.check import worst

if TYPE_CHECKING:
    from checkers.spark.runs_index import RunRow

# a valid run whose faults reached none of its kind's moments: it tested no failover
NOTHING_TESTED = "valid, but its faults reached none of the cluster's moments: nothing failed over"
COLOURS = {"valid": "green", "invalid": "red", "unknown": "yellow", "error": "magenta"}


def load_index(runs: list[Path], spark_master: str | None) -> list[RunRow]:
    """The index of these run folders, from the Spark job over their files."""
    from checkers.spark.runs_index import build_index
    from checkers.spark.session import get_spark

    return build_index(get_spark(spark_master), runs)


def gate_paths(
    paths: list[Path],
    junit: Path | None,
    spark_master: str | None,
    console: Console,
    required: Mapping[str, int] | None = None,
) -> int:
    """Gate every run at or below `paths`: print the table, write JUnit, return the exit code."""
    from checkers.spark.runs_index import find_runs

    return gate_runs(find_runs(paths), {}, junit, spark_master, console, required)


def gate_runs(
    runs: list[Path],
    errors: dict[Path, str],
    junit: Path | None,
    spark_master: str | None,
    console: Console,
    required: Mapping[str, int] | None = None,
) -> int:
    """Gate these runs; `errors` names runs that crashed (their message, exit 255).
    `required`: moments (name → least count) each run must have reached, or it proves nothing
    about them: a valid run that did not is undecided (exit 2)."""
    rows = load_index(runs, spark_master)
    for row in rows:
        if row.verdict != "valid":
            continue
        if required and (missing := row.uncovered(required)):
            row.verdict = "unknown"
            row.note = "valid, but did not reach " + ", ".join(missing)
        elif row.reached_no_moment():
            row.verdict = "unknown"
            row.note = NOTHING_TESTED
    print_table(console, rows, errors)
    if junit is not None:
        write_junit(junit, rows, errors)
        console.print(f"JUnit: {junit}")
    return worst([EXIT_INFRA if r.dir in errors else r.exit_code for r in rows])


def parse_required(given: Sequence[str]) -> dict[str, int]:
    """`--require-moment NAME`, `NAME=COUNT`, or a pair `FIRST>THEN[=COUNT]` (a chain struck at
    FIRST, then at THEN), as name → least count; a name no cluster kind declares is refused."""
    required: dict[str, int] = {}
    known = moment_names()
    for item in given:
        name, _, count = item.partition("=")
        if not name or (count and not (count.isdigit() and int(count) > 0)):
            raise BadInput(
                f"--require-moment takes NAME, NAME=COUNT or FIRST>THEN (a count above 0), "
                f"not {item!r}"
            )
        for part in name.split(">"):
            if part not in known:
                raise BadInput(
                    f"--require-moment: no cluster kind has a moment {part!r}; the moments are "
                    f"{', '.join(known)}"
                )
        required[name] = int(count or 1)
    return required


def moment_names() -> list[str]:
    """Every moment some cluster kind declares, in the kinds' order."""
    names = (m.name for kind in CLUSTER_KINDS.values() for m in kind.moments)
    return list(dict.fromkeys(names))


def verdict_of(row: RunRow, errors: dict[Path, str]) -> str:
    return "error" if row.dir in errors else row.verdict


def print_table(console: Console, rows: list[RunRow], errors: dict[Path, str]) -> None:
    table = Table(title=f"{len(rows)} run{'s' if len(rows) != 1 else ''}", title_justify="left")
    texts = ("run", "cluster", "mode", "workload", "nemesis")
    # the seed, the run's seconds, its worst recovery after a heal, its longest write gap
    figures = ("seed", "s", "recovery s", "no write s")
    for column in (*texts, *figures, "verdict"):
        table.add_column(column, justify="right" if column in figures else "left")
    table.add_column("anomalies", overflow="fold")
    counts: dict[str, int] = {}
    for row in rows:
        verdict = verdict_of(row, errors)
        counts[verdict] = counts.get(verdict, 0) + 1
        extra = " ".join(f"{k}={v}" for k, v in row.options.items())
        table.add_row(
            row.key,
            row.cluster + (f" ({extra})" if extra else ""),
            row.mode,
            row.workloads,
            row.nemesis,
            "" if row.seed is None else str(row.seed),
            "" if row.duration_s is None else f"{row.duration_s:.0f}",
            row.recovery,
            "" if row.longest_gap_s is None else f"{row.longest_gap_s:.1f}",
            f"[{COLOURS[verdict]}]{verdict}[/]",
            errors.get(row.dir) or row.summary or row.note,
        )
    if not console.is_terminal:  # a CI log: rich would fold the table into 80 columns
        console = Console(file=console.file, width=max(console.width, 200), highlight=False)
    console.print(table)
    console.print(", ".join(f"[{COLOURS[v]}]{n} {v}[/]" for v, n in sorted(counts.items())))


def write_junit(path: Path, rows: list[RunRow], errors: dict[Path, str]) -> None:
    """One test case per run; an anomaly is a failure carrying the findings, an undecided,
    unchecked or crashed run an error."""
    failures = sum(1 for r in rows if r.dir not in errors and r.verdict == "invalid")
    errored = sum(1 for r in rows if r.dir in errors or r.verdict == "unknown")
    total_time = sum(r.duration_s or 0.0 for r in rows)
    attrs = {
        "name": "harness",
        "tests": str(len(rows)),
        "failures": str(failures),
        "errors": str(errored),
        "time": f"{total_time:.3f}",
    }
    suites = ET.Element("testsuites", attrs)
    suite = ET.SubElement(
        suites, "testsuite", {**attrs, "skipped": "0", "timestamp": datetime.now().isoformat()}
    )
    for row in rows:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": row.test,
                "name": row.key,
                "time": f"{row.duration_s or 0.0:.3f}",
                "file": str(row.dir),
            },
        )
        props = ET.SubElement(case, "properties")
        for name, value in _properties(row).items():
            ET.SubElement(props, "property", {"name": name, "value": value})
        if row.dir in errors:
            ET.SubElement(
                case, "error", {"type": "error", "message": errors[row.dir]}
            ).text = errors[row.dir]
        elif row.verdict == "invalid":
            failure = ET.SubElement(
                case, "failure", {"type": "anomalies", "message": row.summary or "invalid"}
            )
            failure.text = _details(row)
        elif row.verdict == "unknown":
            ET.SubElement(case, "error", {"type": "unknown", "message": row.note}).text = row.note
        ET.SubElement(case, "system-out").text = f"report: {row.dir / store.REPORT}"
    ET.indent(suites)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _properties(row: RunRow) -> dict[str, str]:
    props = {
        "cluster": row.cluster,
        "mode": row.mode,
        "workloads": row.workloads,
        "nemesis": row.nemesis,
        "seed": "" if row.seed is None else str(row.seed),
        "verdict": row.verdict,
        **row.options,
    }
    return {k: v for k, v in props.items() if v}


def _details(row: RunRow) -> str:
    lines = [f"{row.key}: {row.verdict}"]
    for finding in row.findings:
        lines.append(f"{finding.label}")
        lines += [f"  - {example}" for example in finding.examples]
    lines.append(f"report: {row.dir / store.REPORT}")
    return "\n".join(lines)
