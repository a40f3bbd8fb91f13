"""A class-data archive of Spark's JVM (Java's CDS): Spark starts in half the time with it.

Every `harness check` and `harness run` starts a JVM that loads and verifies some ten thousand
classes before its first job, about 3 s of a 2-core machine's time, and as much again during the
first jobs. Java 17 can dump the classes a run loaded into an archive (`-XX:ArchiveClassesAtExit`)
that later JVMs map instead (`-XX:SharedArchiveFile`). `make setup` builds it once per
environment (`python -m checkers.class_archive`), by running a small check of each kind in a JVM
that dumps at exit; the archive is written beside and renamed into place, since a JVM that maps
a partial one crashes (Spark then starts without it, and the archive is removed). Without the
archive Spark starts as before. The archive lives in the virtual environment and its name
carries what it depends on (the Java binary, PySpark's jars).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DUMP_ENV = "HARNESS_CLASS_ARCHIVE_DUMP"  # set: the JVM dumps its classes there at exit
ARCHIVE_ENV = "HARNESS_CLASS_ARCHIVE"  # set: the archive to map instead of the environment's
# The JVM's own reports about the archive (a stale one is ignored) go to its stdout, the user's.
_QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def java_options() -> list[str]:
    """Options for the JVM about to start: map the archive, or dump one when asked to."""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return [f"-XX:ArchiveClassesAtExit={dump}", *_QUIET]
    archive = path()
    return [f"-XX:SharedArchiveFile={archive}", *_QUIET] if archive.is_file() else []


def path() -> Path:
    """Where this environment's archive is: in the virtual environment, named for its inputs."""
    if os.environ.get(ARCHIVE_ENV):
        return Path(os.environ[ARCHIVE_ENV])
    return Path(sys.prefix) / "share" / "harness" / f"spark-classes-{_fingerprint()}.jsa"


def discard() -> None:
    """Remove the environment's archive, which a JVM could not map (`make setup` builds it
    again); an archive named in ARCHIVE_ENV is the user's and stays."""
    if not os.environ.get(ARCHIVE_ENV):
        path().unlink(missing_ok=True)


def _fingerprint() -> str:
    """What the archive must match: the Java binary and the jars on Spark's class path."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else Path(shutil.which("java") or "java")
    java = java.resolve()
    jars = Path(pyspark.__file__).parent / "jars"
    stat = java.stat() if java.exists() else None
    inputs = [str(java), stat and (stat.st_size, stat.st_mtime_ns), pyspark.__version__, str(jars)]
    return hashlib.sha1(json.dumps(inputs).encode()).hexdigest()[:12]


def build() -> tuple[Path, float | None]:
    """Build the archive unless it is there: (its path, seconds it took or None)."""
    archive = path()
    if archive.is_file():
        return archive, None
    archive.parent.mkdir(parents=True, exist_ok=True)
    for stale in archive.parent.glob(f".{archive.name}.*"):  # an interrupted build's
        stale.unlink()
    draft = archive.with_name(f".{archive.name}.{os.getpid()}")
    started = time.perf_counter()
    try:
        subprocess.run(
            [sys.executable, "-m", "checkers.class_archive", "--exercise"],
            env={**os.environ, DUMP_ENV: str(draft)},
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

    from checkers.spark import get_spark
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
