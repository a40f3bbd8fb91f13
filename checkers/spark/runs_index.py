"""The index of runs: one row per run folder of the store, for `harness serve` and `harness gate`.

DESIGN.md: across runs, the same pipeline reads the store to build the index. One Spark job reads
every run's config.json and results.json whole (one row per file), parses the few fields the index
shows with one schema (the two files share no top-level key), and the driver joins each run's two
rows. Everything else in results.json (operations, series) is skipped by the parser.

Finding the run folders is a walk of the directory tree; a run folder is one that holds a
config.json, a history.jsonl or a results.json.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checkers.moments import pairs_between, reached_no_moment, times_reached
from core import store
from core.errors import BadInput, InfraError
from core.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID

RUN_FILES = (store.CONFIG, store.HISTORY, store.RESULTS)
# Folders inside a run that are never runs themselves.
_NOT_RUNS = {store.NODES, store.OPS}
# How many anomalies of each checker the index keeps as examples (results.json has them all).
EXAMPLES = 3
_STAMP = "%Y%m%dT%H%M%S"
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"

_S = T.StringType()
_CONFIG_FIELDS = [
    T.StructField("name", _S),
    T.StructField("cluster", _S),
    # Option values are read as their JSON text (a number stays "3"): the index only shows them.
    T.StructField("cluster_options", T.MapType(_S, _S)),
    T.StructField("workloads", T.ArrayType(_S)),
    T.StructField("nemesis", T.ArrayType(_S)),
    T.StructField("seed", T.LongType()),
    T.StructField("time_limit", T.DoubleType()),
    T.StructField("isolation", _S),
]
_CHECKER = T.StructType(
    [
        T.StructField("valid", _S),  # true, false or "unknown": read as text
        T.StructField("anomaly_types", T.ArrayType(_S)),
        T.StructField("anomaly_counts", T.MapType(_S, T.LongType())),
        T.StructField(
            "anomalies",
            T.ArrayType(
                T.StructType([T.StructField("type", _S), T.StructField("explanation", _S)])
            ),
        ),
        T.StructField("duration_s", T.DoubleType()),  # the stats checker's
        # the availability checker's
        T.StructField("worst_recovery_s", T.DoubleType()),
        T.StructField("never_recovered", T.BooleanType()),
        T.StructField("longest_gap_s", T.DoubleType()),
        # the cluster-state checker's coverage of the kind's moments
        T.StructField(
            "moments",
            T.ArrayType(
                T.StructType(
                    [
                        T.StructField("moment", _S),
                        T.StructField("reached", T.LongType()),
                        T.StructField("aimed", T.MapType(_S, T.LongType())),
                    ]
                )
            ),
        ),
        # ... and of the steps and pairs of steps its aimed faults reached
        T.StructField(
            "chains",
            T.StructType(
                [
                    T.StructField("steps", T.MapType(_S, T.LongType())),
                    T.StructField("pairs", T.MapType(_S, T.LongType())),
                ]
            ),
        ),
    ]
)
# config.json's fields and results.json's, which share no top-level key: one schema parses both.
SCHEMA = T.StructType(
    [
        *_CONFIG_FIELDS,
        T.StructField("verdict", _S),
        T.StructField("mode", _S),
        T.StructField("checkers", T.MapType(_S, _CHECKER)),
        T.StructField("history", T.StructType([T.StructField("events", T.LongType())])),
        T.StructField("config", T.StructType(_CONFIG_FIELDS)),
    ]
)


@dataclass
class Finding:
    """What one checker found wrong in one run: a kind of anomaly, how many, and examples."""

    checker: str
    type: str
    count: int
    examples: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.checker}: {self.type}" + (f" ×{self.count}" if self.count > 1 else "")


@dataclass
class RunRow:
    """One run of the index."""

    dir: Path
    test: str
    started: datetime | None
    cluster: str = ""
    mode: str = ""
    options: dict[str, str] = field(default_factory=dict)
    workloads: str = ""
    nemesis: str = ""
    seed: int | None = None
    time_limit: float | None = None
    duration_s: float | None = None
    worst_recovery_s: float | None = None  # after a heal, to the first acknowledged write
    never_recovered: bool = False  # after some heal no write was acknowledged again
    longest_gap_s: float | None = None  # the longest stretch with no acknowledged write
    events: int | None = None
    verdict: str = "unknown"
    checked: bool = False
    findings: list[Finding] = field(default_factory=list)
    note: str = ""
    # how often each of the kind's moments was reached (by the polls or an aimed strike)
    moments: dict[str, int] = field(default_factory=dict)
    # the pairs of steps its aimed faults reached ("a > b", each step moment:role:strike)
    pairs: dict[str, int] = field(default_factory=dict)

    def times(self, required: str) -> int:
        """How often the run reached a moment, or a pair of moments "A>B" (a chain struck at
        A, then at B)."""
        first, _, then = required.partition(">")
        if then:
            return pairs_between(self.pairs, first, then)
        return self.moments.get(required, 0)

    def uncovered(self, required: Mapping[str, int]) -> list[str]:
        """The required moments or pairs (name → least count) this run reached fewer times, as
        "term-won (0 of 1)"."""
        return [
            f"{name} ({self.times(name)} of {least})"
            for name, least in required.items()
            if self.times(name) < least
        ]

    def reached_no_moment(self) -> bool:
        """Whether its faults reached none of its kind's moments (moments.reached_no_moment)."""
        return reached_no_moment(self.nemesis.split(","), list(self.moments.values()))

    @property
    def key(self) -> str:
        """The run as the store names it: test name and start stamp."""
        return f"{self.dir.parent.name}/{self.dir.name}"

    @property
    def exit_code(self) -> int:
        return {"valid": EXIT_VALID, "invalid": EXIT_INVALID}.get(self.verdict, EXIT_UNKNOWN)

    @property
    def recovery(self) -> str:
        """The worst recovery after a heal, as the gate shows it."""
        if self.never_recovered:
            return "never"
        return "" if self.worst_recovery_s is None else f"{self.worst_recovery_s:.1f}"

    @property
    def summary(self) -> str:
        """One line: what was found, or why the verdict is unknown."""
        if self.findings:
            return "; ".join(f.label for f in self.findings)
        return self.note

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": str(self.dir),
            "key": self.key,
            "test": self.test,
            "started": self.started.isoformat() if self.started else None,
            "cluster": self.cluster,
            "mode": self.mode,
            "options": self.options,
            "workloads": self.workloads,
            "nemesis": self.nemesis,
            "seed": self.seed,
            "time_limit": self.time_limit,
            "duration_s": self.duration_s,
            "worst_recovery_s": self.worst_recovery_s,
            "never_recovered": self.never_recovered,
            "longest_gap_s": self.longest_gap_s,
            "events": self.events,
            "verdict": self.verdict,
            "checked": self.checked,
            "findings": [f.__dict__ for f in self.findings],
            "note": self.note,
        }


def is_run(path: Path) -> bool:
    return any((path / name).is_file() for name in RUN_FILES)


def find_runs(paths: list[Path]) -> list[Path]:
    """The run folders at or below each path (symbolic links such as `latest` are not followed
    below the top, so no run is found twice). A path that is neither is bad input."""
    found: dict[Path, None] = {}
    for path in paths:
        if not path.exists():
            raise BadInput(f"{path} does not exist: give a results store or a run folder")
        if not path.is_dir():
            raise BadInput(f"{path} is not a folder: give a results store or a run folder")
        runs = runs_below(path)
        if not runs:
            raise BadInput(
                f"{path} is no run folder and holds none (a run folder has "
                f"{store.CONFIG}, {store.HISTORY} or {store.RESULTS})"
            )
        found.update(dict.fromkeys(runs))
    return list(found)


def runs_below(path: Path) -> list[Path]:
    """The run folders at or below `path` (resolved), none if there are none."""
    top = path.resolve()
    if is_run(top):
        return [top]
    runs = []
    for parent, dirs, _files in os.walk(top):
        here = Path(parent)
        keep = []
        for name in sorted(dirs):
            if name in _NOT_RUNS or name.startswith(".") or (here / name).is_symlink():
                continue
            if is_run(here / name):
                runs.append(here / name)
            else:
                keep.append(name)
        dirs[:] = keep
    return runs


def build_index(spark: SparkSession, runs: list[Path]) -> list[RunRow]:
    """The index of the given run folders, oldest first."""
    files = [str(run / name) for run in runs for name in (store.CONFIG, store.RESULTS)]
    files = [f for f in files if os.path.isfile(f)]
    parsed: dict[Path, dict[str, Any]] = {run: {} for run in runs}
    if files:
        # The files are named one by one: Spark would start a job to list more than 32 of them
        # (seconds for a few hundred runs), where looking at each on the driver takes
        # milliseconds.
        previous = spark.conf.get(_LISTING_THRESHOLD)
        spark.conf.set(_LISTING_THRESHOLD, str(len(files) + 1))
        try:
            rows = (
                spark.read.text(files, wholetext=True)
                .select(
                    F.col("_metadata.file_path").alias("file"),
                    F.from_json("value", SCHEMA).alias("doc"),
                )
                .collect()
            )
        except (PySparkException, Py4JError) as e:
            raise InfraError(f"Spark failed while reading the store's runs: {e}") from e
        finally:
            spark.conf.set(_LISTING_THRESHOLD, previous)
        for row in rows:
            path = _local_path(row["file"])
            doc = row["doc"].asDict(recursive=True) if row["doc"] is not None else None
            parsed.setdefault(path.parent, {})[path.name] = doc
    index = [_row(run, parsed.get(run, {})) for run in runs]
    return sorted(index, key=lambda r: (r.started or datetime.min, r.key))


def _local_path(uri: str) -> Path:
    """A file as Spark names it (`file:/a/b%20c/x.json`) as the local path it is."""
    for prefix in ("file://", "file:"):
        if uri.startswith(prefix):
            uri = uri[len(prefix) :]
            break
    return Path(unquote(uri))


def started_at(run: Path) -> datetime | None:
    """When the run started: its folder is named by the start time (`20261121T101500`, or with a
    `-N` suffix); a folder named otherwise is dated by its oldest file."""
    try:
        return datetime.strptime(run.name.split("-")[0], _STAMP)
    except ValueError:
        pass
    times = [(run / n).stat().st_mtime for n in RUN_FILES if (run / n).exists()]
    return datetime.fromtimestamp(min(times)) if times else None


def _row(run: Path, docs: dict[str, Any]) -> RunRow:
    config = docs.get(store.CONFIG) or {}
    results = docs.get(store.RESULTS)
    if not config and results:
        config = results.get("config") or {}
    options = {k: str(v) for k, v in (config.get("cluster_options") or {}).items() if v is not None}
    row = RunRow(
        dir=run,
        test=config.get("name") or run.parent.name,
        started=started_at(run),
        cluster=config.get("cluster") or "",
        options=options,
        workloads=",".join(config.get("workloads") or []),
        nemesis=",".join(config.get("nemesis") or []),
        seed=config.get("seed"),
        time_limit=config.get("time_limit"),
    )
    row.mode = options.pop("mode", "") or (results or {}).get("mode") or ""
    if store.RESULTS not in docs:
        row.note = f"not checked: no {store.RESULTS}"
        return row
    if results is None or results.get("verdict") is None:
        row.note = f"{store.RESULTS} is unreadable or has no verdict"
        return row
    row.checked = True
    row.verdict = results["verdict"]
    row.events = (results.get("history") or {}).get("events")
    for name, checker in (results.get("checkers") or {}).items():
        if checker.get("duration_s") is not None:
            row.duration_s = checker["duration_s"]
        for m in checker.get("moments") or []:
            row.moments[m["moment"]] = times_reached(m)
        row.pairs.update((checker.get("chains") or {}).get("pairs") or {})
        if name == "availability":
            row.worst_recovery_s = checker.get("worst_recovery_s")
            row.never_recovered = bool(checker.get("never_recovered"))
            row.longest_gap_s = checker.get("longest_gap_s")
        if checker.get("valid") != "false":  # a valid checker's findings are allowed
            continue
        counts = checker.get("anomaly_counts") or {}
        anomalies = checker.get("anomalies") or []
        for kind in checker.get("anomaly_types") or []:
            examples = [a["explanation"] for a in anomalies if a["type"] == kind][:EXAMPLES]
            count = counts.get(kind) or sum(1 for a in anomalies if a["type"] == kind) or 1
            row.findings.append(Finding(name, kind, count, [e for e in examples if e]))
        if not checker.get("anomaly_types"):
            row.findings.append(Finding(name, "invalid", 1))
    if row.verdict == "unknown" and not row.note:
        checkers = results.get("checkers") or {}
        undecided = [n for n, c in checkers.items() if c["valid"] not in ("true", "false")]
        row.note = "could not decide: " + (", ".join(undecided) or "no checker decided")
    return row
