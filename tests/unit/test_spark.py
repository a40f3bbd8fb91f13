"""The Spark session keeps Spark's own chatter out of the user's terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_starting_spark_and_running_a_job_prints_nothing() -> None:
    script = (
        "from checkers.spark import get_spark\n"
        "spark = get_spark('local[1]')\n"
        "assert get_spark() is spark\n"
        "assert spark.range(1000).groupBy().count().first()[0] == 1000\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
