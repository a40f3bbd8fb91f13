"""Analysis of stored histories: DESIGN.md's steps 5–6 (check, report) for runs and bare files.

`harness check` and the end of `harness run` both come here, so a re-check gives exactly the
verdict the run gave. Several paths share one Spark session; the exit code is the worst verdict.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from checkers.moments import reached_no_moment, times_reached
from core import store
from core.contract import Contract
from core.errors import BadInput
from core.verdict import EXIT_BAD_INPUT, EXIT_INFRA, exit_code
from harness.plan import TestPlan
from harness.report import render_report
from workloads.bank import Bank as BankWorkload

if TYPE_CHECKING:
    from checkers.spark.session import Spark

SLOW_CHECK_S = 10.0  # a check this long says where its time went
# Worst first: an infrastructure error, bad input, an anomaly, an undecided check, valid.
SEVERITY = [EXIT_INFRA, EXIT_BAD_INPUT, 1, 2, 0]


def worst(codes: list[int]) -> int:
    return min(codes, key=SEVERITY.index) if codes else 0


@dataclass
class Target:
    """One thing to check: which history, where its analysis goes, the plan it is held to, and
    the run's own evidence beside the history (its polls of the cluster, WAL checksums)."""

    history: Path
    out_dir: Path
    plan: TestPlan
    config: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the report says of how it was read


@dataclass(frozen=True)
class Bank:
    """What `harness check` was told of a bare bank history (None: read it off the history)."""

    accounts: int | None = None
    total: int | None = None


def resolve(
    path: Path, workloads: list[str] | None, out: Path | None, bank: Bank = Bank()
) -> Target:
    """A run folder carries its own configuration; a bare history needs `--workload`."""
    if not path.exists():
        raise BadInput(f"{path} does not exist: give a run folder or a history.jsonl file")
    if path.is_dir():
        history = path / store.HISTORY
        if not history.exists():
            raise BadInput(f"{path} has no {store.HISTORY}: is it a run folder?")
        config_path = path / store.CONFIG
        config = store.read_json(config_path) if config_path.exists() else {}
        if not (workloads or config.get("workloads")):
            raise BadInput(f"{path} has no {store.CONFIG}: say which workload with --workload")
        try:
            plan = TestPlan.of_config(config, workloads)
        except BadInput as e:
            raise BadInput(f"{config_path}: {e}") from e
        state = {"polls": path / store.POLLS, "digests": path / store.NODES / store.WAL_DIGESTS}
        found = {k: str(v) for k, v in state.items() if v.is_file()}
        if (path / store.NODES).is_dir():  # the nodes' logs, for the logs checker
            found["logs"] = str(path / store.NODES)
        return Target(history, out or path, plan, config, found)
    if not workloads:
        raise BadInput(f"{path} is a bare history: say which workload it is with --workload")
    out_dir = out or path.parent / f"{path.stem}-check"
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = []
    if path.suffix == ".edn":  # Jepsen's format: checked as the same history in ours
        from harness.edn_history import read_events

        events = read_events(path)
        converted = out_dir / store.HISTORY
        with converted.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in events)
        notes.append(f"read from Jepsen's EDN history {path} ({len(events)} events)")
        path = converted
    params = default_params(workloads)
    if BankWorkload.name in workloads:
        params[BankWorkload.name], note = bank_params(path, bank)
        notes += [note] if note else []
    config = {"workloads": workloads, "history": str(path)}
    return Target(path, out_dir, TestPlan.of_history(workloads, params), config, notes=notes)


def bank_params(path: Path, given: Bank) -> tuple[dict[str, Any], str | None]:
    """The accounts and total a bare bank history is held to: those given, and the rest read off
    its first successful read (whose keys are the accounts and whose sum is the total); the note
    says which were read, and from where."""
    accounts = [str(a) for a in range(given.accounts)] if given.accounts is not None else None
    total = given.total
    if accounts is not None and total is not None:
        return {"accounts": accounts, "total": total}, None
    first = first_bank_read(path)
    if first is None:
        raise BadInput(
            f"{path} has no successful bank read to take the accounts and total from: "
            "give --accounts and --total"
        )
    index, balances = first
    taken = []
    if accounts is None:
        numeric = all(k.lstrip("-").isdigit() for k in balances)
        accounts = sorted(balances, key=int) if numeric else sorted(balances)
        taken.append(f"accounts {', '.join(accounts)}")
    if total is None:
        total = sum(v for v in balances.values() if isinstance(v, int))
        taken.append(f"total {total}")
    note = (
        f"bank: {' and '.join(taken)} taken from the first successful read (event {index}); "
        "give --accounts and --total to hold the history to others"
    )
    return {"accounts": accounts, "total": total}, note


def first_bank_read(path: Path) -> tuple[int, dict[str, Any]] | None:
    """The index and balances of the history's first ok bank read, if any."""
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f):
            if '"read"' not in line or '"ok"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(event, dict)
                and (event.get("type"), event.get("f")) == ("ok", "read")
                and event.get("workload") in (None, BankWorkload.name)
                and isinstance(event.get("value"), dict)
            ):
                return event.get("index", number), event["value"]
    return None


def default_params(names: list[str]) -> dict[str, dict[str, Any]]:
    """What the checkers assume of a bare history: the workloads' default settings."""
    from workloads import build
    from workloads.base import WorkloadOptions

    return {w.name: w.checker_params() for w in build(names, WorkloadOptions())}


def analyze(
    spark: Spark,
    target: Target,
    console: Console,
    model: str | None = None,
    contract: Contract | None = None,
    max_recovery: float | None = None,
) -> dict[str, Any]:
    """Run the pipeline on one target and write results.json and report.html beside it.

    `model` overrides the consistency model the append checker holds the history to, `contract`
    the run's contract (which the append and set checkers hold it to), `max_recovery` the run's
    bound on recovery after a heal."""
    from checkers.spark.pipeline import analyze as run_pipeline
    from checkers.spark.pipeline import peak_mib

    plan = target.plan.holding(contract, max_recovery)
    params = plan.params(model, **target.evidence)

    # On a terminal, a line that names the step under way (gone when the check ends).
    with console.status(f"checking {target.history}") as status:

        def step(what: str) -> None:
            status.update(f"checking {target.history}: {what}")

        results = run_pipeline(
            spark, target.history, target.out_dir, plan.checkers(), params, step, plan.writes
        )
        results["mode"] = plan.contract.value
        results["plan"] = plan.to_json()
        results["config"] = target.config
        results["notes"] = target.notes + results.get("notes", [])
        if untested(results):
            results["notes"].append(UNTESTED)
        store.write_json(target.out_dir / store.RESULTS, results)
        step("writing the report")
        began = time.perf_counter()
        render_report(results, target.out_dir / store.REPORT, target.out_dir)
        # the report's step too (results.json, written first, is whole should the report fail)
        results.setdefault("seconds", {})["report"] = round(time.perf_counter() - began, 3)
        results.setdefault("peak_mib", {})["report"] = peak_mib()
        store.write_json(target.out_dir / store.RESULTS, results)
    return results


def check_paths(
    paths: list[Path],
    workloads: list[str] | None,
    out: Path | None,
    spark_master: str | None,
    console: Console,
    model: str | None = None,
    contract: Contract | None = None,
    max_recovery: float | None = None,
    bank: Bank = Bank(),
) -> int:
    """Check each path, print its verdict and report path; return the worst exit code. `model`,
    `contract` and `max_recovery`, when given, override each run's."""
    from checkers.spark.session import small_history, start_spark

    if out is not None and len(paths) > 1:
        raise BadInput("--out takes one path to check; drop it to write beside each history")
    if len(paths) == 1:  # one path: its bad input is the whole answer (exit 254 via the CLI)
        target = resolve(paths[0], workloads, out, bank)
        # one short history: a JVM that compiles for it, unless the process has one already
        spark = start_spark(spark_master, small=small_history(target.history))
        results = analyze(spark, target, console, model, contract, max_recovery)
        print_verdict(console, results, target.out_dir)
        return exit_code(results["valid"])
    spark = start_spark(spark_master)
    codes = []
    for path in paths:
        try:
            target = resolve(path, workloads, out, bank)
            results = analyze(spark, target, console, model, contract, max_recovery)
        except BadInput as e:
            console.print(f"[red]error:[/] {e}")
            codes.append(EXIT_BAD_INPUT)
            continue
        print_verdict(console, results, target.out_dir)
        codes.append(exit_code(results["valid"]))
    return worst(codes)


UNTESTED = (
    "the faults reached none of the cluster's moments: nothing failed over, so this run tested "
    "no failover however valid it is (a gate counts it undecided); give the faults longer "
    "(--nemesis-interval) or aim them (--nemesis aimed)"
)


def untested(results: dict[str, Any]) -> bool:
    """Whether a valid run reached none of its kind's moments (moments.reached_no_moment)."""
    table = (results["checkers"].get("cluster-state") or {}).get("moments") or []
    nemesis = (results.get("config") or {}).get("nemesis") or []
    reached = [times_reached(row) for row in table]
    return results.get("verdict") == "valid" and reached_no_moment(nemesis, reached)


def print_verdict(console: Console, results: dict[str, Any], out_dir: Path) -> None:
    colour = {"valid": "green", "invalid": "red"}.get(results["verdict"], "yellow")
    summary = []
    for name, checker in results["checkers"].items():
        if checker.get("valid") is False:  # a valid checker's findings (stale, …) are allowed
            summary += [f"{name}: {kind}" for kind in checker.get("anomaly_types", [])]
    for note in results.get("notes", []):
        console.print(f"[yellow]note:[/] {note}")
    state = results["checkers"].get("cluster-state") or {}
    if table := state.get("moments") or []:
        counts = ", ".join(f"{row['moment']} {times_reached(row)}" for row in table)
        console.print(f"moments reached: {counts}")
    if (chains := state.get("chains") or {}).get("chains"):
        console.print(
            f"aimed steps reached: {len(chains['steps'])} distinct, "
            f"{len(chains['pairs'])} distinct pairs, in {chains['chains']} aimed faults"
        )
    if (recovered := state.get("recovered_s")) is not None:
        console.print(f"whole again {recovered:.1f} s after the last fault healed")
    if untested(results):
        summary.append("but no moment was reached: see the note")
    seconds = results.get("seconds") or {}
    if (took := sum(seconds.values())) >= SLOW_CHECK_S:
        slowest = sorted(seconds.items(), key=lambda kv: -kv[1])[:3]
        peaks = results.get("peak_mib") or {}
        # the step in which the process's memory reached its high-water mark
        grew = max(peaks, key=lambda name: peaks[name], default=None)
        console.print(
            f"[dim]the check took {took:.1f} s: "
            + ", ".join(f"{name} {s:.1f}" for name, s in slowest)
            + (f"; its memory peaked at {peaks[grew]:,} MiB, in {grew}" if grew else "")
            + "[/]"
        )
    console.print(
        f"[bold {colour}]{results['verdict']}[/]"
        + (f" ({'; '.join(summary)})" if summary else "")
        + f"  report: {out_dir / store.REPORT}"
    )
