"""The Spark session keeps Spark's own chatter out of the user's terminal, and starts from the
class archive that setup builds, or without it when it cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
from pyspark.sql import SparkSession

from checkers.spark import class_archive
from harness.spark_workers import zips_last

ROOT = Path(__file__).resolve().parents[2]


def run_script(script: str) -> subprocess.CompletedProcess[str]:
    """Run Python code in a fresh process (a process has one Spark session) from the project."""
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_starting_spark_and_running_a_job_prints_nothing() -> None:
    script = (
        "from checkers.spark.session import get_spark\n"
        "spark = get_spark('local[1]')\n"
        "assert get_spark() is spark\n"
        "assert spark.range(1000).groupBy().count().first()[0] == 1000\n"
    )
    done = run_script(script)
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")


def test_a_session_started_in_the_background_is_the_one_a_check_gets() -> None:
    script = (
        "import threading\n"
        "from checkers.spark.session import get_spark, session_of, start_spark\n"
        "from core.errors import InfraError\n"
        "spark = start_spark('local[1]')\n"
        "assert 'spark-start' in [t.name for t in threading.enumerate()]\n"
        "session = session_of(spark)\n"
        "assert session is get_spark() and session_of(session) is session\n"
        "assert session.range(10).count() == 10\n"
        "session.stop()\n"
        "try:\n"
        "    session_of(start_spark('no-such-master'))\n"
        "except InfraError as e:\n"
        "    print(e)\n"
    )
    done = run_script(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Spark could not start with master 'no-such-master'")


# A job in a fresh process; prints whether the JVM has the class archive mapped (its pages show
# in the JVM's memory map).
MAPPED = (
    "import os\n"
    "from checkers.spark import class_archive\n"
    "from checkers.spark.session import get_spark\n"
    "spark = get_spark('local[1]')\n"
    "assert spark.range(10).count() == 10\n"
    "jvm = spark.sparkContext._gateway.proc.pid\n"
    "maps = open(f'/proc/{jvm}/maps').read()\n"
    "print(str(class_archive.path()) in maps)\n"
)


def run_mapped(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", MAPPED],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_spark_maps_the_class_archive_that_setup_built(tmp_path: Path) -> None:
    archive = class_archive.path()
    assert archive.is_file(), f"{archive} is missing: `make setup` builds it"
    done = run_mapped({}, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "True\n", "")


def test_spark_starts_without_an_archive_it_cannot_map(tmp_path: Path) -> None:
    """A damaged archive (the first half of a good one) crashes the JVM that maps it (with a
    crash report): Spark then starts without it."""
    damaged = tmp_path / "damaged.jsa"
    with class_archive.path().open("rb") as good:
        damaged.write_bytes(good.read(class_archive.path().stat().st_size // 2))
    done = run_mapped({class_archive.ARCHIVE_ENV: str(damaged)}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False", done.stdout
    assert damaged.exists(), "an archive the user named is not the harness's to remove"


def _pyspark_of_worker(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyspark

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"file": pyspark.__file__}])


def test_python_workers_import_the_compiled_pyspark_not_the_zip(spark: SparkSession) -> None:
    """Spark puts its zip of pyspark first on its workers' path; the harness's daemon moves it
    behind the installed, compiled copy."""
    files = spark.range(4, numPartitions=2).mapInArrow(_pyspark_of_worker, "file string")
    found = {row["file"] for row in files.collect()}
    assert found and not any(".zip" in f for f in found), found
    assert found == {pyspark.__file__}


def test_the_daemon_moves_only_sparks_zips_to_the_end_of_the_path() -> None:
    lib = "/venv/site-packages/pyspark/python/lib"
    path = [f"{lib}/pyspark.zip", "/project", f"{lib}/py4j-0.10.9.9-src.zip", "/other/x.zip"]
    assert zips_last(path) == [
        "/project",
        "/other/x.zip",
        f"{lib}/pyspark.zip",
        f"{lib}/py4j-0.10.9.9-src.zip",
    ]


def test_a_session_for_a_short_history_compiles_with_c1_alone_and_maps_the_archive(
    tmp_path: Path,
) -> None:
    """A run's or a check's one short history: the JVM stops at the quick compiler (a third less
    of its CPU on a 60 s run's history) and still maps the class archive."""
    script = (
        "from checkers.spark import class_archive\n"
        "from checkers.spark.session import get_spark\n"
        "spark = get_spark('local[1]', small=True)\n"
        "assert spark.range(10).count() == 10\n"
        "jvm = spark.sparkContext._jvm\n"
        "bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(\n"
        "    jvm.java.lang.Class.forName('com.sun.management.HotSpotDiagnosticMXBean'))\n"
        "print(bean.getVMOption('TieredStopAtLevel').getValue())\n"
        "pid = spark.sparkContext._gateway.proc.pid\n"
        "print(str(class_archive.path()) in open(f'/proc/{pid}/maps').read())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "1\nTrue\n", "")


def test_a_history_is_short_by_its_size(tmp_path: Path) -> None:
    from checkers.spark.session import BYTES_PER_OP, SMALL_OPS, small_history

    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_bytes(b"x" * (SMALL_OPS * BYTES_PER_OP))
    assert small_history(run) and small_history(run / "history.jsonl")
    with (run / "history.jsonl").open("ab") as f:
        f.write(b"x")
    assert not small_history(run)
    assert not small_history(tmp_path / "nothing")
