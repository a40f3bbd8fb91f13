"""Stores of runs written by hand, for the index, the gate, `harness serve` and the browser.

A run folder here is what `harness run` leaves before its check (config.json, history.jsonl);
`check` (or `harness check`) then writes the real results.json and report.html beside them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MS = 1_000_000

# An element that every test looking for an anomaly expects to see named.
LOST = 3


def set_history(lose: bool, elements: int = 6) -> list[dict[str, Any]]:
    """Adds of 0…elements-1, all acknowledged, then a final read; `lose` drops LOST from it."""
    events: list[dict[str, Any]] = []

    def add(event: dict[str, Any]) -> None:
        events.append({"index": len(events), "time": len(events) * MS, **event})

    for e in range(elements):
        add({"process": e % 2, "type": "invoke", "f": "add", "value": e, "workload": "set"})
        add({"process": e % 2, "type": "ok", "f": "add", "value": e, "workload": "set"})
    read = [e for e in range(elements) if not (lose and e == LOST)]
    add({"process": 2, "type": "invoke", "f": "read", "value": None, "workload": "set"})
    add({"process": 2, "type": "ok", "f": "read", "value": read, "workload": "set"})
    return events


def make_run(
    store: Path,
    test: str,
    stamp: str,
    lose: bool = False,
    **config: Any,
) -> Path:
    """A set run folder, unchecked: config.json (the defaults of `harness run`, cluster single,
    overridden by `config`) and its history."""
    run = store / test / stamp
    run.mkdir(parents=True)
    settings = {
        "cluster": "single",
        "cluster_options": {},
        "workloads": ["set"],
        "nemesis": ["none"],
        "seed": 0,
        "time_limit": 5.0,
        "name": None,
        "workload_params": {},
    } | config
    (run / "config.json").write_text(json.dumps(settings))
    lines = [json.dumps(e) for e in set_history(lose)]
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    (run / "nodes" / "n1").mkdir(parents=True)
    (run / "nodes" / "n1" / "postgres.log").write_text("LOG:  starting PostgreSQL 15\n")
    return run


def check(spark: Any, run: Path) -> dict[str, Any]:
    """What `harness check RUN` does, in this process: results.json and report.html."""
    from rich.console import Console

    from harness.check import analyze, resolve

    return analyze(spark, resolve(run, None, None), Console(quiet=True))
