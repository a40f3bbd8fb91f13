"""Harness bank throughput against pgbench's on the same Postgres node, printed as a ratio.

Both drive the same transactions (a transfer: read the source, two updates; a read of every
balance; half each) at serializable isolation with the same number of clients, as fast as they can,
against the same `single` node in Docker reached through the same loopback port. The harness's
figure includes everything a run does per operation: generating it, recording invoke and
completion in the history, classifying errors.

    .venv/bin/python bench/bank_vs_pgbench.py [--seconds 30] [--clients 10]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from clusters.registry import make_backend

PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
HARNESS = str(Path(sys.executable).parent / "harness")

TRANSFER = """\\set src random(0, 4)
\\set dst random(0, 4)
\\set amount random(1, 5)
BEGIN;
SELECT balance FROM bank_accounts WHERE id = :src;
UPDATE bank_accounts SET balance = balance - :amount WHERE id = :src;
UPDATE bank_accounts SET balance = balance + :amount WHERE id = :dst;
COMMIT;
"""
READ = "BEGIN;\nSELECT id, balance FROM bank_accounts ORDER BY id;\nCOMMIT;\n"


def harness_rate(store: Path, seconds: int, clients: int) -> tuple[float, float, dict, Path]:
    """Run the harness's bank workload; return (ok/s, completed/s, config, run folder)."""
    subprocess.run(
        [
            HARNESS,
            "run",
            "--workload",
            "bank",
            "--rate",
            "0",
            "--concurrency",
            str(clients),
            "--time",
            str(seconds),
            "--store",
            str(store),
            "--keep-cluster",
            "--settle",
            "0",
            "--name",
            "bench",
        ],
        check=False,
        stdout=subprocess.DEVNULL,
    )
    run = (store / "latest").resolve()
    events = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    done = [e for e in events if e["type"] != "invoke" and e["process"] < 10_000_000]
    span = (max(e["time"] for e in done) - min(e["time"] for e in events)) / 1e9
    ok = sum(1 for e in done if e["type"] == "ok")
    return ok / span, len(done) / span, json.loads((run / "config.json").read_text()), run


def pgbench_rate(host: str, port: int, seconds: int, clients: int) -> tuple[float, float]:
    """Run pgbench with the same transactions; return (ok tps, attempted tps)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "transfer.sql").write_text(TRANSFER)
        (Path(tmp) / "read.sql").write_text(READ)
        env = dict(os.environ, PGOPTIONS="-c default_transaction_isolation=serializable")
        out = subprocess.run(
            [
                PGBENCH,
                "-h",
                host,
                "-p",
                str(port),
                "-U",
                "postgres",
                "-n",
                "-c",
                str(clients),
                "-j",
                "2",
                "-T",
                str(seconds),
                "--max-tries",
                "1",
                "--failures-detailed",
                "-f",
                f"{tmp}/transfer.sql@1",
                "-f",
                f"{tmp}/read.sql@1",
                "harness",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
    processed = int(re.search(r"number of transactions actually processed: (\d+)", out)[1])
    failed = re.search(r"number of failed transactions: (\d+)", out)
    failures = int(failed[1]) if failed else 0
    return processed / seconds, (processed + failures) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    backend = make_backend("docker")
    with tempfile.TemporaryDirectory() as tmp:
        ok_h, all_h, config, _run = harness_rate(Path(tmp), args.seconds, args.clients)
        cluster = config["cluster_name"]
        try:
            (node,) = backend.nodes(cluster)
            host, port = node.endpoint(5432)
            ok_p, all_p = pgbench_rate(host, port, args.seconds, args.clients)
        finally:
            backend.down(cluster)
    print(f"bank, {args.clients} clients, {args.seconds} s, serializable, one node in Docker")
    print(f"  harness : {ok_h:8.1f} ok ops/s  {all_h:8.1f} completed ops/s")
    print(f"  pgbench : {ok_p:8.1f} ok tx/s   {all_p:8.1f} attempted tx/s")
    print(f"  ratio harness/pgbench: ok {ok_h / ok_p:.2f}   completed {all_h / all_p:.2f}")


if __name__ == "__main__":
    main()
