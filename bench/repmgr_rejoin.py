"""A deposed primary rejoined by repmgr's own procedure, again and again: does it follow?

On a repmgr cluster (the kind's deployment, a witness, short reconnection so that repmgrd fails
over within seconds), each round writes from `--writers` clients, kills the primary (every
process, as a crash), waits until repmgrd has promoted a standby, waits `--after` seconds, and
runs `repmgr node rejoin --force-rewind` on the old primary as repmgr's manual says (through the
kind's `rejoin`, which keeps its output in the node's rejoin.log). A row per round: who was
deposed and who promoted, the seconds from the promotion to the rejoin, the timeline the new
primary serves and the one its pg_control names at the rejoin (pg_rewind decides from the
latter), what the rejoin answered, and whether the node reached its new primary's timeline
within 30 s. A node that did not is cloned afresh before the next round. `--checkpoint` issues
a CHECKPOINT on the new primary first: the control, after which every rejoin should follow.

    .venv/bin/python bench/repmgr_rejoin.py --rounds 5 [--after 0] [--checkpoint] [--writers 4]
    .venv/bin/python bench/repmgr_rejoin.py --table
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from run_rows import append_row, commit, read_rows, table

from clusters.docker_backend import DockerBackend
from clusters.kinds.repmgr import RepmgrCluster, member_state
from clusters.kinds.streaming import ask
from nemesis.kill import Kill

ROWS = Path(__file__).resolve().parent / "repmgr_rejoin_rows.jsonl"
CLUSTER = "rejoin-bench"
OPTIONS = {"reconnect_attempts": 2, "reconnect_interval": 2}
COLUMNS = (
    ("round", "round"),
    ("checkpoint", "CHECKPOINT first"),
    ("deposed", "deposed"),
    ("promoted", "promoted"),
    ("after_s", "promotion → rejoin s"),
    ("timeline", "new primary's timeline"),
    ("control_timeline", "its pg_control's"),
    ("status", "rejoin exit"),
    ("said", "rejoin's last line"),
    ("followed", "streams within 30 s"),
)


class Writers:
    """Clients inserting rows of `size` bytes through the members' connection string."""

    def __init__(self, kind: RepmgrCluster, count: int, size: int) -> None:
        ep = kind.endpoints()[0]
        self.params = {"host": ep.host, "port": ep.port, "dbname": ep.dbname, "user": ep.user,
                       "target_session_attrs": "read-write", "autocommit": True,
                       "connect_timeout": 2}  # fmt: skip
        self.size, self.stop = size, threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(count)]

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(**self.params) as conn:
                    conn.execute("CREATE TABLE IF NOT EXISTS rows (pad text)")
                    while not self.stop.is_set():
                        conn.execute("INSERT INTO rows SELECT repeat('x', %s) FROM "
                                     "generate_series(1, 20)", (self.size,))  # fmt: skip
            except psycopg.Error:
                time.sleep(0.2)

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def promoted(kind: RepmgrCluster, old: str, within: float = 120.0) -> tuple[str, float]:
    """The member repmgrd promoted in `old`'s place, once repmgr's table on it names it the
    primary (as an operator reads `repmgr cluster show` before a rejoin), and when it was
    first seen writable."""
    deadline = time.monotonic() + within
    seen: float | None = None
    while time.monotonic() < deadline:
        for node in kind.members():
            if node.name != old and (s := member_state(node)) is not None and s.writable:
                seen = seen or time.monotonic()
                if s.primary_seen == (node.name,):
                    return node.name, seen
        time.sleep(0.5)
    raise RuntimeError(f"no standby was promoted within {within:g} s of {old}'s kill")


def one_round(kind: RepmgrCluster, n: int, args: argparse.Namespace) -> dict[str, Any]:
    old = kind.leader()
    if old is None:
        raise RuntimeError("no member takes writes")
    with Writers(kind, args.writers, args.row_bytes):
        time.sleep(args.load_s)
        Kill("primaries", None).start(kind)
        new, seen = promoted(kind, old)
        time.sleep(args.after)
    primary = next(x for x in kind.members() if x.name == new)
    if args.checkpoint:
        ask(primary, "CHECKPOINT", 120)
    timeline = member_state(primary).timeline  # type: ignore[union-attr]
    control = ask(primary, "SELECT timeline_id FROM pg_control_checkpoint()")
    after = round(time.monotonic() - seen, 1)
    node = next(x for x in kind.members() if x.name == old)
    done = kind.rejoin(node, new, clone_if_stuck=False)
    if not done["followed"]:
        kind.rejoin(node, new)  # a fresh clone for the next round
    kind.start_repmgrd(node)
    time.sleep(5)  # repmgrd on the old node registers it again
    return {
        "round": n, "checkpoint": args.checkpoint, "deposed": old, "promoted": new,
        "after_s": after, "timeline": timeline, "control_timeline": control,
        "status": done["status"], "said": (done["said"] or [""])[-1][:60],
        "followed": done["followed"], "date": time.strftime("%Y-%m-%d"), "commit": commit(),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--after", type=float, default=0.0,
                        help="seconds from the promotion to the rejoin")  # fmt: skip
    parser.add_argument(
        "--checkpoint", action="store_true",
        help="CHECKPOINT on the new primary before the rejoin: the control",
    )  # fmt: skip
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--row-bytes", type=int, default=2000)
    parser.add_argument("--load-s", type=float, default=5.0, help="seconds of writes before a kill")
    parser.add_argument("--rows", type=Path, default=ROWS)
    parser.add_argument("--table", action="store_true", help="print the rows so far")
    args = parser.parse_args()
    if args.table:
        print(table(COLUMNS, read_rows(args.rows)))
        return
    backend = DockerBackend()
    kind = RepmgrCluster(backend, CLUSTER, OPTIONS)
    try:
        kind.deploy(lambda msg: print(msg, flush=True))
        for n in range(1, args.rounds + 1):
            row = one_round(kind, n, args)
            append_row(args.rows, row)
            print(row, flush=True)
    finally:
        backend.down(CLUSTER)
    print(table(COLUMNS, [r for r in read_rows(args.rows) if r.get("commit") == commit()]))


if __name__ == "__main__":
    main()
