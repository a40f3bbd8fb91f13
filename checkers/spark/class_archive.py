"""A class-data archive of Spark's JVM (Java's CDS): Spark starts in half the time with it.

Every `harness check` and `harness run` starts a JVM that loads and verifies some ten thousand
classes before its first job, about 3 s of a 2-core machine's time, and as much again during the
first jobs. Java 17 can dump the classes a run loaded into an archive (`-XX:ArchiveClassesAtExit`)
that later JVMs map instead (`-XX:SharedArchiveFile`). `make setup` builds it once per
environment (`python -m harness.spark_archive`, which checks a small history of each kind in a
JVM that dumps at exit); the archive is written beside and renamed into place, since a JVM that
maps a partial one crashes (Spark then starts without it, and the archive is removed). Without the
archive Spark starts as before. The archive lives in the virtual environment and its name
carries what it depends on (the Java binary, PySpark's jars).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

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
