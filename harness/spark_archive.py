"""Building the class-data archive of Spark's JVM (checkers/spark/class_archive.py says what it is,
how Spark maps it): `make setup` runs `python -m harness.spark_archive`, which checks a small
history of each workload in a JVM that dumps the classes it loaded as it exits. It lives with the
harness because the check it exercises is the harness's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from checkers.spark import class_archive


def build() -> tuple[Path, float | None]:
    """Build the archive unless it is there: (its path, seconds it took or None)."""
    archive = class_archive.path()
    if archive.is_file():
        return archive, None
    archive.parent.mkdir(parents=True, exist_ok=True)
    for stale in archive.parent.glob(f".{archive.name}.*"):  # an interrupted build's
        stale.unlink()
    draft = archive.with_name(f".{archive.name}.{os.getpid()}")
    started = time.perf_counter()
    try:
        subprocess.run(
            [sys.executable, "-m", "harness.spark_archive", "--exercise"],
            env={**os.environ, class_archive.DUMP_ENV: str(draft)},
            check=True,
            stdout=subprocess.DEVNULL,
        )
        if not draft.is_file():
            raise RuntimeError(f"the JVM wrote no class archive at {draft}")
        os.replace(draft, archive)
    finally:
        draft.unlink(missing_ok=True)
    return archive, time.perf_counter() - started


def _exercise() -> None:
    """Check a small history of each workload, so that the JVM loads what checks use."""
    from rich.console import Console

    from checkers.spark.session import get_spark
    from harness.check import check_paths

    with tempfile.TemporaryDirectory() as tmp:
        for workload, history in _histories(Path(tmp)).items():
            check_paths([history], [workload], None, None, Console(quiet=True))
    # The JVM dumps as it exits, which it does when its stdin closes: wait for that here, so
    # that the archive is complete when this process ends.
    jvm = get_spark().sparkContext._gateway.proc
    get_spark().stop()
    jvm.stdin.close()
    jvm.wait()


def _histories(folder: Path) -> dict[str, Path]:
    """Tiny valid histories of the append, set and bank workloads (their default settings)."""
    lists: dict[int, list[int]] = {}
    ops: dict[str, list[tuple[str, Any, Any]]] = {"append": [], "set": [], "bank": []}
    for k in range(30):
        lists.setdefault(k % 3, []).append(k)
        invoked = [["append", k % 3, k], ["r", k % 3, None]]
        ops["append"].append(("txn", invoked, [invoked[0], ["r", k % 3, list(lists[k % 3])]]))
        ops["set"].append(("add", k, k))
        ops["bank"].append(("read", None, {str(a): 20 for a in range(5)}))
    ops["set"].append(("read", None, list(range(30))))
    paths = {}
    for workload, steps in ops.items():
        lines = []
        for i, (f, value, result) in enumerate(steps):
            for n, (type_, v) in enumerate((("invoke", value), ("ok", result))):
                event = {"index": 2 * i + n, "time": 2 * i + n, "process": i % 3, "type": type_}
                lines.append(json.dumps(event | {"f": f, "value": v}) + "\n")
        paths[workload] = folder / f"{workload}.jsonl"
        paths[workload].write_text("".join(lines))
    return paths


def main() -> None:
    if sys.argv[1:] == ["--exercise"]:
        _exercise()
        return
    archive, took = build()
    state = "already there" if took is None else f"built in {took:.0f} s"
    print(f"Spark class archive: {archive} ({state})")


if __name__ == "__main__":
    main()
