"""What the long benchmarks that drive `harness run` (soak.py, detection.py) share: where a test's
newest run folder is, the rows file they append to as each run ends (so that hours of runs can be
read while they go, and resumed), the anomalies a run's results name, and the Markdown table
README carries."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from checkers.moments import times_reached


def latest_run(test_dir: Path) -> Path | None:
    runs = sorted(p for p in test_dir.glob("*") if p.is_dir()) if test_dir.is_dir() else []
    return runs[-1] if runs else None


def run_row(
    cmd: list[str],
    store: Path,
    name: str,
    keys: dict[str, Any],
    read_run: Callable[[Path], dict[str, Any]],
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one `harness run` command (`--store store --name name` added; in `env` if given) and
    make its row: `keys`, exit code, minutes, date and commit, then what `read_run` reads of the
    run folder (or the command's last words when it left no checked run)."""
    started = time.monotonic()
    done = subprocess.run([*cmd, "--store", str(store), "--name", name],
                          capture_output=True, text=True, env=env)  # fmt: skip
    row = keys | {
        "exit": done.returncode,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
    }
    run = latest_run(store / name)
    if run is None or not (run / "results.json").exists():
        said = done.stderr.strip()
        return row | {
            "verdict": "error",
            "anomalies": f"…{said[-300:]}" if len(said) > 300 else said,
        }
    return row | {"run": str(run)} | read_run(run)


def checked_run(run: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A checked run folder's results, its history, and its checkers' results."""
    results = json.loads((run / "results.json").read_text())
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()
               if line.strip()]  # fmt: skip
    return results, history, results.get("checkers") or {}


def chosen_runs(
    parser: argparse.ArgumentParser, args: argparse.Namespace, configs: Mapping[str, Any]
) -> list[tuple[str, int]]:
    """The (configuration, seed) pairs `--configs` and `--seeds` name, seeds outermost; a bad
    name or a `--time` not above 0 is the parser's error."""
    if args.time <= 0:
        parser.error("--time is seconds of each run, above 0")
    chosen = [c for c in args.configs.split(",") if c]
    if unknown := [c for c in chosen if c not in configs]:
        parser.error(f"unknown config {unknown[0]!r}: choose from {', '.join(configs)}")
    return [(c, int(s)) for s in args.seeds.split(",") if s for c in chosen]


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_row(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def work_through(
    rows: Path,
    plan: list[tuple[Any, ...]],
    key: Callable[[dict[str, Any]], tuple[Any, ...]],
    make: Callable[..., dict[str, Any]],
    say: Callable[[dict[str, Any]], str],
    until: float | None = None,
) -> None:
    """Make a row for each planned key (`make(*key)`) that `rows` lacks (`key(row)` of those
    there), one at a time, appending each to `rows` as it ends and printing `say(row)`; none
    is begun after `until` (a time.time()), so that a sitting ends between rows."""
    done = {key(row) for row in read_rows(rows)}
    todo = [planned for planned in plan if planned not in done]
    print(f"{len(todo)} to make, one at a time ({len(plan) - len(todo)} done before)", flush=True)
    for i, planned in enumerate(todo, 1):
        if until is not None and time.time() >= until:
            print(f"{time.strftime('%H:%M')}: past --until, {len(todo) - i + 1} left for another "
                  "sitting (the same command resumes)", flush=True)  # fmt: skip
            return
        print(f"[{i}/{len(todo)}] {time.strftime('%H:%M')} {' '.join(map(str, planned))} …",
              flush=True)  # fmt: skip
        row = make(*planned)
        append_row(rows, row)
        print(f"    {say(row)}", flush=True)


def bench_configs(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    configs: Mapping[str, Any],
    columns: tuple[tuple[str, str], ...],
    run_one: Callable[[str, int, argparse.Namespace], dict[str, Any]],
    say: Callable[[dict[str, Any]], str],
) -> int:
    """What a bench of named configurations does once its options are parsed: print its rows
    as a table (`--table`), or make a row for each (configuration, seed) its rows lack."""
    if args.table:
        print(table(columns, read_rows(args.rows)))
        return 0
    work_through(
        args.rows,
        chosen_runs(parser, args, configs),
        lambda row: (row["config"], row["seed"]),
        lambda config, seed: run_one(config, seed, args),
        say,
        until=args.until,
    )
    return 0


def anomalies(results: dict[str, Any]) -> list[str]:
    """Each invalid checker's anomaly types, as "checker: type"."""
    return [
        f"{name}: {kind}"
        for name, checker in (results.get("checkers") or {}).items()
        if checker.get("valid") is False
        for kind in checker.get("anomaly_types") or []
    ]


def moments_reached(results: dict[str, Any]) -> dict[str, int]:
    """How often the run reached each of its kind's moments (the report's Moments table)."""
    checker = (results.get("checkers") or {}).get("cluster-state") or {}
    return {row["moment"]: times_reached(row) for row in checker.get("moments") or []}


def moments_text(counts: dict[str, int]) -> str:
    """Moment counts as a table's cell: "term-won 3, catch-up 0"."""
    return ", ".join(f"{name} {n}" for name, n in counts.items())


def first_anomaly_s(results: dict[str, Any]) -> float | None:
    """When the earliest operation of any anomaly that makes a checker red began (or its window,
    when it names none): a valid checker's notes (the set's `recovered`) are not anomalies."""
    times = []
    for checker in (results.get("checkers") or {}).values():
        if checker.get("valid") is not False:
            continue
        for anomaly in checker.get("anomalies") or []:
            ops = [op for op in anomaly.get("ops") or [] if isinstance(op, dict)]
            times += [op["invoke_time"] for op in ops if op.get("invoke_time") is not None]
            if not ops and anomaly.get("window_ns"):
                times.append(anomaly["window_ns"][0])
    return round(min(times) / 1e9, 1) if times else None


def commit() -> str:
    """The commit the harness runs from (with "+" when its tree has changes), as each row says."""
    here = Path(__file__).parent
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return (head or "unknown") + ("+" if dirty else "")


def table(columns: tuple[tuple[str, str], ...], rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table, each with the date and commit it ran on: `columns` are
    (key, title)."""
    columns = (("date", "date"), ("commit", "ran on"), *columns)
    head = "| " + " | ".join(title for _, title in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    lines = [head, rule]
    for row in rows:
        cells = ["" if row.get(key) is None else cell(row[key]) for key, _ in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell(value: Any) -> str:
    """A value as one Markdown table cell: on one line, its bars escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


def rows_options(parser: argparse.ArgumentParser, folder: str, rows: Path | None = None) -> None:
    """`--store`, `--rows` and `--table`, as every benchmark that keeps rows has them: under
    results/<folder> unless told (`rows`: the rows file elsewhere by default)."""
    results = Path(__file__).resolve().parent.parent / "results" / folder
    parser.add_argument("--store", type=Path, default=results)
    parser.add_argument("--rows", type=Path, default=rows or results / "rows.jsonl")
    parser.add_argument("--table", action="store_true", help="print the rows file as a table")
    parser.add_argument(
        "--until",
        type=until_time,
        metavar="HH:MM",
        help="begin no row after this time of day (the next such time): the bench stops "
        "between rows, and the same command resumes it",
    )


def until_time(text: str) -> float:
    """ "HH:MM" as the next moment the clock shows it (time.time())."""
    try:
        hour, minute = (int(part) for part in text.split(":"))
        if not (0 <= hour < 24 and 0 <= minute < 60):
            raise ValueError(text)
        now = time.localtime()
        at = time.mktime((*now[:3], hour, minute, 0, 0, 0, now.tm_isdst))
    except (ValueError, OverflowError) as e:
        raise argparse.ArgumentTypeError(f"{text!r} is no time of day HH:MM") from e
    return at if at > time.time() else at + 86400


NS = 1e9


def suite_judgment(history: list[dict[str, Any]]) -> dict[str, int | None]:
    """What the Patroni suite's checker says of the set workload: acknowledged adds absent from
    the final read (lost), and elements the final read has that no add attempted
    (unexpected). None without a final read."""
    attempted, acknowledged, final = set(), set(), None
    for op in history:
        if op.get("workload") != "set":
            continue
        if op["f"] == "add" and op["type"] == "invoke":
            attempted.add(op["value"])
        elif op["f"] == "add" and op["type"] == "ok":
            acknowledged.add(op["value"])
        elif op["f"] == "read" and op["type"] == "ok":
            final = set(op["value"] or [])  # the last ok read is the final one
    if final is None:
        return {"suite_lost": None, "suite_unexpected": None}
    return {
        "suite_lost": len(acknowledged - final),
        "suite_unexpected": len(final - attempted),
    }


def acknowledged_writes(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ok completions of operations that write (an invocation says whether it writes)."""
    invoked: dict[Any, dict[str, Any]] = {}
    writes = []
    for op in history:
        if op["type"] == "invoke":
            invoked[op["process"]] = op
        elif op["type"] == "ok" and (invoked.get(op["process"]) or {}).get("write"):
            writes.append(op)
    return writes


def kill_to_write(history: list[dict[str, Any]]) -> float | None:
    """The longest wait (s) from a kill that hit the node serving writes to the next
    acknowledged write."""
    writes = acknowledged_writes(history)
    worst = None
    for op in history:
        if op.get("process") != "nemesis" or op["type"] != "info":
            continue
        if not str(op["f"]).startswith("start-kill") or op.get("error"):
            continue
        hit = set((op.get("value") or {}).get("targets") or [])
        before = [w for w in writes if w["time"] < op["time"]]
        if not before or before[-1].get("node") not in hit:
            continue
        after = next((w for w in writes if w["time"] > op["time"]), None)
        if after is not None:
            wait = (after["time"] - op["time"]) / NS
            worst = wait if worst is None else max(worst, wait)
    return None if worst is None else round(worst, 1)


def cut_off_acks(history: list[dict[str, Any]], coordinators: set[str]) -> float | None:
    """The longest stretch (s) over which a primary cut off from the coordinators alone
    (partition-dcs: etcd, the monitor) went on acknowledging writes, from the cut to its last
    acknowledged write before the heal."""
    worst = None
    cut: tuple[str, int] | None = None
    writes = {id(op) for op in acknowledged_writes(history)}
    for op in history:
        if op.get("process") == "nemesis" and op["type"] == "info":
            value = op.get("value") or {}
            if op["f"] == "start-partition" and value.get("shape") == "primary-coordinators":
                grudge = value.get("grudge") or {}
                cut_off = [n for n, away in grudge.items() if n not in coordinators and away]
                cut = (cut_off[0], op["time"]) if cut_off else None
            elif op["f"] == "stop-partition":
                cut = None
        elif cut and id(op) in writes and op.get("node") == cut[0]:
            acks = (op["time"] - cut[1]) / NS
            worst = acks if worst is None else max(worst, acks)
    return None if worst is None else round(worst, 1)


def coordinators_of(status: dict[str, Any]) -> set[str]:
    """The coordinators' nodes, as a run's final cluster status names them (etcd servers, a
    pg_auto_failover monitor)."""
    nodes = status.get("nodes") or {}
    return {n for n, s in nodes.items() if s.get("role") in ("etcd", "monitor")}
