"""The one Spark session of a harness process, configured to stay quiet in the user's terminal.

Spark's JVM logs through log4j; `log4j2.properties` next to this file lets only errors through.
The JVM also prints one line no log4j setting reaches (Spark always loads the incubator vector
module, and Java announces it on stderr), so the JVM's stderr is piped through a filter that drops
that line and forwards everything else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.java_gateway import launch_gateway
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from checkers.spark import class_archive
from core.errors import InfraError

MASTER_ENV = "HARNESS_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
LOCAL_DRIVER_MEMORY = "4g"
# A process that checks one history of at most this many operations starts a JVM for it (_conf);
# a history file holds about this many bytes an operation (two events).
SMALL_OPS = 100_000
BYTES_PER_OP = 360
LOG4J_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")
# Lines the JVM writes to stderr outside log4j that carry nothing for the user.
_JVM_NOISE = (b"WARNING: Using incubator modules",)
# PySpark loggers that print a JSON copy of each failed query's exception, which is raised anyway.
_PY_DUPLICATE_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")

_session: SparkSession | None = None
_lock = threading.Lock()

Spark = SparkSession | Callable[[], SparkSession]
"""A session, or how to get it when it is first needed (it may still be starting)."""


def get_spark(master: str | None = None, small: bool = False) -> SparkSession:
    """The process's Spark session, created on first use (master: argument, env, `local[*]`);
    `small`: the process checks short histories (SMALL_OPS operations at most), and its JVM
    compiles for those (`_conf`).

    Later calls return the same session whatever they ask: one JVM per process.
    """
    global _session
    with _lock:
        if _session is None or _session.sparkContext._jsc is None:
            _session = _create(master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER, small)
        return _session


def start_spark(master: str | None = None, small: bool = False) -> Callable[[], SparkSession]:
    """Begin launching the process's session in the background; return how to get it.

    The JVM takes seconds to start, which the driver's own first work (reading the history) can
    overlap. A launch that fails here is tried again, and reported, by the call that needs it.
    """
    threading.Thread(target=_launch, args=(master, small), name="spark-start", daemon=True).start()
    return lambda: get_spark(master, small)


def small_history(path: Path) -> bool:
    """Whether a history file (or a run folder's) holds SMALL_OPS operations at most, by its
    size."""
    history = path / "history.jsonl" if path.is_dir() else path
    try:
        return history.stat().st_size <= SMALL_OPS * BYTES_PER_OP
    except OSError:
        return False  # the check says what is wrong with it


def session_of(spark: Spark) -> SparkSession:
    """The session itself, waiting for it if it is still starting."""
    return spark if isinstance(spark, SparkSession) else spark()


def _launch(master: str | None, small: bool) -> None:
    # whatever stopped it (a JVM that Ctrl-C ended as it booted: py4j's own errors too), the
    # call that needs the session launches it again and says why it could not
    with contextlib.suppress(Exception):
        get_spark(master, small)


def _conf(master: str, archive: bool = True, small: bool = False) -> SparkConf:
    """Settings handed to the JVM at launch (log4j is configured before the JVM logs a line);
    `archive`: with the class-data archive, when there is one; `small`: for one short
    history."""
    java_options = [f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"]
    if archive:
        java_options += class_archive.java_options()
    conf = (
        SparkConf()
        .setMaster(master)
        .setAppName("harness-check")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.ui.enabled", "false")
    )
    if master.startswith("local"):
        # The analysis is a batch job in this JVM: the parallel collector's cheaper barriers
        # cost about a tenth less CPU than the default G1 (bench/pairing.py), and pauses do not
        # matter.
        java_options.append("-XX:+UseParallelGC")
        # A check is one JVM's whole life, and a cold JVM spends a third of its CPU compiling
        # (25 of 70 CPU-s at 1M transactions): the optimizing compiler waits for code ten times
        # hotter than its default, so it skips what runs only briefly: JIT CPU -26 %, a check
        # of 1M about 1.5 s quicker (45.7 -> 44.2 s), of 10k 0.7 s (paired runs on 2 cores).
        java_options += [
            "-XX:Tier4InvocationThreshold=50000",
            "-XX:Tier4CompileThreshold=100000",
            "-XX:Tier4BackEdgeThreshold=300000",
        ]
        if small:
            # A short history (a 60 s run's 10k events) is done before profiled code pays
            # off: the quick compiler alone takes a third less of the JVM's CPU (9.0 to 5.4–6.3
            # CPU-s), where it took 8 % more at 1M transactions.
            java_options.append("-XX:TieredStopAtLevel=1")
        # Executors live in the driver's JVM: no network exposure, and histories are small
        # enough that Spark's default 200 shuffle partitions would be mostly scheduling overhead.
        conf.set("spark.driver.host", "127.0.0.1")
        conf.set("spark.driver.bindAddress", "127.0.0.1")
        conf.set("spark.sql.shuffle.partitions", "4")
        # Python workers import the installed, compiled pyspark rather than Spark's zip of it.
        conf.set("spark.python.daemon.module", "harness.spark_workers")
        # Everything runs in this one JVM; Spark's default 1g cannot hold the set workload's big
        # reads (each lists the whole set) while it parses, pairs and writes them.
        conf.set("spark.driver.memory", LOCAL_DRIVER_MEMORY)
    return conf.set("spark.driver.extraJavaOptions", " ".join(java_options))


def _create(master: str, small: bool) -> SparkSession:
    """Launch the JVM with its stderr filtered, then build the session on it."""
    conf = _conf(master, small=small)
    # Python workers (the checkers' per-key passes) run this interpreter, with its packages, not
    # whatever `python3` is first on the PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
        except PySparkException:
            if not class_archive.java_options():
                raise
            # A JVM that maps a damaged archive dies at once (with a crash report): without it.
            conf = _conf(master, archive=False, small=small)
            gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
            class_archive.discard()
        threading.Thread(
            target=_forward_stderr, args=(gateway.proc.stderr,), name="spark-stderr", daemon=True
        ).start()
        context = SparkContext(conf=conf, gateway=gateway)
        for name in _PY_DUPLICATE_LOGGERS:
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
        return SparkSession(context)
    except (PySparkException, OSError) as e:
        raise InfraError(f"Spark could not start with master {master!r}: {e}") from e


def _forward_stderr(source: IO[bytes]) -> None:
    """Copy the JVM's stderr to ours, minus the known noise, until the JVM exits.

    The pipe must be drained whatever happens to our stderr, or the JVM would block on a write.
    """
    for line in source:
        if line.startswith(_JVM_NOISE):
            continue
        try:
            sys.stderr.write(line.decode(errors="replace"))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
