"""What a run costs beyond its faults: the seconds of `harness run --time T` before the clients
start (deploy), after they stop (heal, settle, final reads, logs kept, teardown) and in the check,
and the CPU each kind of process took meanwhile (the cluster's, the harness's, the engine's, and
the engine's helpers: docker-proxy, fuse-overlayfs).

Each run's phases are read off its own output and folder: from `run folder:` to config.json's
writing (the deploy's end), from there to `healed` (the clients' time, the heal), from `healed`
to `tore down`, and from `checking the history` to the verdict. CPU is sampled from /proc every
0.5 s for every process of the machine; a process's CPU after its last sample is lost (a short
`docker exec` may be missed), so the columns are lower bounds. Meant for A/B comparisons of two
checkouts, runs alternating, alone on the machine:

    .venv/bin/python bench/run_overhead.py \
        --harness /other/checkout/.venv/bin/harness,.venv/bin/harness --runs 3 \
        [--time 20] [--options "--nemesis partition-primary"]
    .venv/bin/python bench/run_overhead.py --table
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from run_rows import append_row, read_rows, rows_options, table

HARNESS = Path(sys.executable).parent / "harness"
ROWS = Path(__file__).resolve().parent / "run_overhead_rows.jsonl"
# Processes by command name, grouped as the table shows them.
GROUPS = {
    "docker-proxy": "docker-proxy",
    "fuse-overlayfs": "fuse-overlayfs",
    "dockerd": "engine",
    "containerd": "engine",
    "containerd-shim": "engine",
    "runc": "engine",
    "harness": "harness",
    "java": "harness",
    "postgres": "postgres",
}
COLUMNS = (
    ("options", "options"),
    ("deploy_s", "deploy s"),
    ("drive_s", "clients and heal s"),
    ("wind_down_s", "heal to teardown s"),
    ("check_s", "check s"),
    ("total_s", "total s"),
    ("verdict", "verdict"),
    (
        "cpu",
        "CPU % of a core: python3 (daemons, Spark workers), postgres, harness, engine, proxy, fuse",
    ),
)


def group(name: str) -> str:
    if name in GROUPS:
        return GROUPS[name]
    if name.startswith(("python", "pyspark")):
        return "python3"  # the reference daemons and Spark's workers
    return "other"


class CpuSampler:
    """CPU seconds by group of processes, while it runs."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._hz = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> CpuSampler:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.wall = time.monotonic() - self._began

    def _snapshot(self) -> dict[tuple[str, str], tuple[str, int]]:
        found = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            # (pid, start time): a pid used again is another process
            found[(pid, fields[19])] = (name, int(fields[11]) + int(fields[12]))
        return found

    def _sample(self) -> None:
        last = self._snapshot()
        while not self._stop.wait(0.5):
            now = self._snapshot()
            for key, (name, ticks) in now.items():
                before = last.get(key, (name, 0))[1]
                self.seconds[group(name)] += (ticks - before) / self._hz
            last = now

    def percents(self) -> dict[str, float]:
        return {k: round(100 * v / self.wall, 1) for k, v in self.seconds.most_common()}


def checkout_of(harness: Path) -> str:
    """The commit of the checkout a venv's `harness` runs (…/.venv/bin/harness)."""
    root = harness.absolute().parent.parent.parent
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    return head or str(root)


def one_run(harness: Path, args: argparse.Namespace, store: Path) -> dict[str, Any]:
    cmd = [str(harness), "run", "--time", str(args.time), "--store", str(store),
           *shlex.split(args.options)]  # fmt: skip
    marks: dict[str, float] = {}
    patterns = {"run folder:": "opened", "healed": "healed", "tore down": "torn_down",
                "checking the history": "checking"}  # fmt: skip
    run_dir = None
    with CpuSampler() as cpu:
        began, wall_began = time.monotonic(), time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "COLUMNS": "200"})  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            at = time.monotonic() - began
            for text, mark in patterns.items():
                if text in line and mark not in marks:
                    marks[mark] = at
                    if mark == "opened":
                        run_dir = Path(line.split("run folder:", 1)[1].strip())
        code = proc.wait()
        ended = time.monotonic() - began
    row: dict[str, Any] = {
        "commit": checkout_of(harness),  # the checkout that ran, whichever this bench is
        "options": args.options,
        "time_s": args.time,
        "exit": code,
        "total_s": round(ended, 1),
    }
    if run_dir is None or not (run_dir / "config.json").is_file():
        return row | {"verdict": "error"}
    # the deploy ends when the run writes its config (runner._deploy)
    deployed = (run_dir / "config.json").stat().st_mtime - wall_began
    results = run_dir / "results.json"
    verdict = json.loads(results.read_text())["verdict"] if results.is_file() else "error"
    shares = cpu.percents()
    return row | {
        "run": str(run_dir),
        "verdict": verdict,
        "deploy_s": round(deployed - marks["opened"], 1),
        "drive_s": round(marks.get("healed", ended) - deployed, 1),
        "wind_down_s": round(marks.get("torn_down", ended) - marks.get("healed", ended), 1),
        "check_s": round(ended - marks.get("checking", ended), 1),
        "cpu_percent": shares,
        "cpu": ", ".join(
            f"{shares.get(k, 0.0):g}"
            for k in ("python3", "postgres", "harness", "engine", "docker-proxy", "fuse-overlayfs")
        ),
        "date": time.strftime("%Y-%m-%d"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--harness",
        default=str(HARNESS),
        help="comma-separated `harness` commands of the checkouts to compare",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each, alternating")
    parser.add_argument("--time", type=float, default=20.0, help="seconds of each run")
    parser.add_argument("--options", default="", help="more options for every run")
    rows_options(parser, "run-overhead", ROWS)
    args = parser.parse_args()
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return 0
    harnesses = [Path(h) for h in args.harness.split(",") if h]
    if missing := [h for h in harnesses if not h.is_file()]:
        parser.error(f"no harness command at {missing[0]}")
    for number in range(args.runs):
        for harness in harnesses:
            row = one_run(harness, args, args.store)
            append_row(args.rows, row)
            print(f"run {number + 1}, {row['commit']}: {json.dumps(row)}", flush=True)
    print(table(COLUMNS, read_rows(args.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
