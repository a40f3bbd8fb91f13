"""What load the harness drives with the append workload, beside pgbench on the same cluster
(issue 56: the Long Fork search ran at 34–58 committed transactions a second; Jepsen's RDS test
ran its clients as fast as they went).

Each row is one configuration: `harness run --cluster streaming --workload append --isolation
repeatable-read --read-from any --nemesis none --rate 0` (a primary and two hot standbys, reads
spread over every node, the clients as fast as they go) with its number of workers, keys in
flight and pause between a transaction's statements, kept up at its end; from its history, the
transactions attempted, committed (ok), refused (fail: serialization failures, mostly) and of
unknown outcome (info) a second over the workload's span. Then pgbench on the same primary with
the same clients, as fast as they go, running the same transaction (read a key's list, append
to it, at repeatable read, the key drawn from as many as the run had in flight), so the two
columns say what the harness costs against what the cluster can commit. One cluster at a time.

    nohup .venv/bin/python bench/append_load.py [--configs base,keys50,…] [--time 60]
        [--pgbench-time 20] > append-load.log 2>&1 &
    .venv/bin/python bench/append_load.py --table
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from run_rows import read_rows, rows_options, run_row, table, work_through

from clusters.registry import make_backend
from core.history import FINAL_READS_PROCESS

HARNESS = Path(sys.executable).parent / "harness"
PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
# name → (workers, keys in flight, pause between statements in ms)
CONFIGS: dict[str, tuple[int, int, float]] = {
    "search": (20, 5, 10),  # the Long Fork search's flat-out row
    "no-pause": (20, 5, 0),
    "keys50": (20, 50, 0),
    "keys50-w40": (40, 50, 0),
    "keys200-w40": (40, 200, 0),
}
COLUMNS = (
    ("config", "config"),
    ("workers", "workers"),
    ("keys", "keys"),
    ("op_pause", "pause ms"),
    ("attempted_per_s", "harness attempted/s"),
    ("ok_per_s", "committed/s"),
    ("fail_per_s", "refused/s"),
    ("info_per_s", "unknown/s"),
    ("pgbench_ok_per_s", "pgbench committed/s"),
    ("pgbench_failed_per_s", "pgbench refused/s"),
    ("ratio", "harness / pgbench"),
    ("verdict", "verdict"),
)
# The append transaction as pgbench runs it: read a key's list, append to it.
# Its keys lie far above the run's, which it leaves alone.
SCRIPT = """\\set k 1000000000 + random(1, {keys})
\\set v random(1, 2000000000)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT vals FROM append_lists WHERE k = :k;
INSERT INTO append_lists (k, vals) VALUES (:k, ARRAY[:v]::bigint[])
  ON CONFLICT (k) DO UPDATE SET vals = append_lists.vals || EXCLUDED.vals;
COMMIT;
"""


def rates(run: Path) -> dict[str, Any]:
    """A run's client transactions a second over the workload's span, by outcome."""
    events = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    client = [
        e
        for e in events
        if isinstance(e.get("process"), int) and e["process"] < FINAL_READS_PROCESS
    ]
    done = [e for e in client if e["type"] != "invoke"]
    if not done:
        return {}
    span = (max(e["time"] for e in done) - min(e["time"] for e in client)) / 1e9
    count = {t: sum(1 for e in done if e["type"] == t) for t in ("ok", "fail", "info")}
    results = json.loads((run / "results.json").read_text())
    return {
        "attempted_per_s": round(len(done) / span, 1),
        "ok_per_s": round(count["ok"] / span, 1),
        "fail_per_s": round(count["fail"] / span, 1),
        "info_per_s": round(count["info"] / span, 1),
        "verdict": results.get("verdict"),
    }


def pgbench(host: str, port: int, seconds: int, clients: int, keys: int) -> dict[str, float]:
    """pgbench's append transaction on the primary: committed and refused a second."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "append.sql"
        script.write_text(SCRIPT.format(keys=keys))
        out = subprocess.run(
            [PGBENCH, "-h", host, "-p", str(port), "-U", "postgres", "-n", "-c", str(clients),
             "-j", "2", "-T", str(seconds), "--max-tries", "1", "--failures-detailed",
             "-f", str(script), "harness"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    # pgbench exits 2 when a client aborted (an error it does not retry), yet says what the
    # others did: the row keeps those figures; with none, the row says pgbench's own words
    processed = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
    if processed is None:
        said = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        raise RuntimeError(f"pgbench reported nothing: {said}")
    failed = re.search(r"number of failed transactions: (\d+)", out.stdout)
    return {
        "pgbench_ok_per_s": round(int(processed[1]) / seconds, 1),
        "pgbench_failed_per_s": round((int(failed[1]) if failed else 0) / seconds, 1),
        **({"pgbench_exit": out.returncode} if out.returncode else {}),
    }


def make(config: str, args: argparse.Namespace) -> dict[str, Any]:
    workers, keys, pause = CONFIGS[config]
    cmd = [
        str(HARNESS), "run", "--cluster", "streaming", "--workload", "append",
        "--isolation", "repeatable-read", "--read-from", "any", "--nemesis", "none",
        "--rate", "0", "--concurrency", str(workers), "--key-count", str(keys),
        "--op-pause", str(pause), "--time", str(args.time), "--keep-cluster",
    ]  # fmt: skip
    keys_row = {"config": config, "workers": workers, "keys": keys, "op_pause": pause}
    row = run_row(cmd, args.store, f"append-load-{config}", keys_row, rates)
    if "run" not in row:
        return row
    cluster = json.loads((Path(row["run"]) / "config.json").read_text())["cluster_name"]
    backend = make_backend("docker")
    try:
        primary = next(n for n in backend.nodes(cluster) if n.name == "n1")  # no fault: n1
        host, port = primary.endpoint(5432)
        row |= pgbench(host, port, args.pgbench_time, workers, keys)
    finally:
        backend.down(cluster)
    if row.get("pgbench_ok_per_s"):
        row["ratio"] = round(row.get("ok_per_s", 0) / row["pgbench_ok_per_s"], 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help=", ".join(CONFIGS))
    parser.add_argument("--time", type=int, default=60, help="seconds of each harness run")
    parser.add_argument("--pgbench-time", type=int, default=20, help="seconds of pgbench")
    rows_options(parser, "append-load", Path(__file__).with_name("append_load_rows.jsonl"))
    args = parser.parse_args()
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return
    configs = [c for c in args.configs.split(",") if c]
    if unknown := [c for c in configs if c not in CONFIGS]:
        parser.error(f"unknown config {unknown[0]!r}: choose from {', '.join(CONFIGS)}")
    work_through(
        args.rows,
        [(c,) for c in configs],
        lambda row: (row["config"],),
        lambda c: make(c, args),
        lambda row: " ".join(f"{k} {row.get(k)}" for k, _ in COLUMNS[4:]),
        args.until,
    )


if __name__ == "__main__":
    main()
