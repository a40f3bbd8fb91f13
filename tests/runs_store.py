"""Stores of runs written by hand, for the index, the gate, `harness serve` and the browser.

A run folder here is what `harness run` leaves before its check (config.json, history.jsonl);
`check` (or `harness check`) then writes the real results.json and report.html beside them.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.e2e.conftest import HARNESS, harness

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
    polls: list[dict[str, Any]] | None = None,
    **config: Any,
) -> Path:
    """A set run folder, unchecked: config.json (the defaults of `harness run`, cluster single,
    overridden by `config`), its history and, if given, the cluster's polls."""
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
    if polls:
        (run / "cluster.jsonl").write_text("".join(json.dumps(p) + "\n" for p in polls))
    (run / "nodes" / "n1").mkdir(parents=True)
    (run / "nodes" / "n1" / "postgres.log").write_text("LOG:  starting PostgreSQL 15\n")
    return run


def check(spark: Any, run: Path) -> dict[str, Any]:
    """What `harness check RUN` does, in this process: results.json and report.html."""
    from rich.console import Console

    from harness.check import analyze, resolve

    return analyze(spark, resolve(run, None, None), Console(quiet=True))


# A test name no browser may read as markup: the index and reports must escape it.
HOSTILE = "<img src=x onerror=alert(1)>"

# The failover of the invalid run, as its cluster's polls saw it: n1 led term 1, nobody led for
# a while, then n2 took over in term 2.
FAILOVER = [
    {"time": 0, "nodes": {"n1": {"serving": True, "term": 1}, "n2": {"serving": False}}},
    {"time": 4 * MS, "nodes": {"n2": {"serving": False}}},
    {"time": 7 * MS, "nodes": {"n1": {"serving": False}, "n2": {"serving": True, "term": 2}}},
]


def checked_store(root: Path, timeout: float = 600) -> dict[str, Path]:
    """A store of real checked runs, as `harness check` leaves them: one valid, one invalid (an
    acknowledged add lost) whose names and settings are markup, one never checked."""
    runs = {
        "valid": make_run(root, "single-set-none", "20261121T100000"),
        "invalid": make_run(
            root,
            HOSTILE,
            "20261121T100100",
            lose=True,
            name=HOSTILE,
            cluster="safekeeper",
            cluster_options={"bug": "<script>alert(2)</script>"},
            nemesis=["kill"],
            polls=FAILOVER,
        ),
        "unchecked": make_run(root, "single-set-none", "20261121T100200"),
    }
    done = harness("check", str(runs["valid"]), str(runs["invalid"]), timeout=timeout)
    assert done.returncode == 1, done.stdout + done.stderr
    return runs


@contextlib.contextmanager
def served(store: Path, *args: str, startup: float = 300) -> Iterator[str]:
    """`harness serve` on a free loopback port over `store`: its URL, until the block ends."""
    proc = subprocess.Popen(
        [HARNESS, "serve", "--store", str(store), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + startup
        seen = []
        for line in proc.stdout:  # the server says its address once its index is built
            seen.append(line)
            found = re.search(r"http://\S+/", line)
            if found:
                yield found.group(0)
                return
            assert time.monotonic() < deadline, "".join(seen)
        raise AssertionError(f"harness serve exited {proc.wait()}: {''.join(seen)}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_checked_store(root: Path) -> Iterator[tuple[dict[str, Path], str]]:
    """A module's fixture: `checked_store` at `root`, served; the runs and the URL."""
    runs = checked_store(root)
    with served(root) as url:
        yield runs, url
