"""The results store: one folder per run under `<store>/<test-name>/<timestamp>/`, and `latest`."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

HISTORY = "history.jsonl"
CONFIG = "config.json"
RESULTS = "results.json"
REPORT = "report.html"
OPS = "ops.parquet"
NODES = "nodes"
POLLS = "cluster.jsonl"  # the cluster's account of itself during the run (core/polls.py)
WAL_DIGESTS = "wal-digests.json"  # in NODES: checksums of each safekeeper's WAL, by LSN range


def new_run_dir(store: Path, test_name: str) -> Path:
    """Create a fresh run folder named by the start time (suffixed if two start the same second)."""
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    base = store / test_name
    base.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        run = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            run.mkdir()
            return run
        except FileExistsError:
            continue
    raise FileExistsError(f"too many runs named {stamp} in {base}")


def point_latest(store: Path, run_dir: Path) -> None:
    """Make `<store>/latest` point at `run_dir` (a relative link, replaced atomically)."""
    link = store / "latest"
    tmp = store / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(os.path.relpath(run_dir, store))
    tmp.replace(link)


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
