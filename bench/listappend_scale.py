"""How the list-append checker scales: synthetic valid histories of 10k, 100k and 1M transactions
(or, with `--primaries`, a split brain's, which must be found invalid and decided).

The histories look like the append workload's: its own generator (workloads/append.py: a small
rotating key space, 1–4 micro-operations per transaction, a key retires after 32 appends) drives
`--concurrency` simulated processes whose transactions overlap in time. Each transaction takes
effect atomically at a point between its invocation and its completion, against an in-memory
store, so the history is strict serializable (and so serializable): the checker should find it
valid, and the figures are those of a clean history. A few transactions fail (no effect) or end
`info` (an effect or not, at random; the process is then replaced, as the runner does), and a
final transaction reads every key, as the workload's final read does. Each process is bound to one
of `--nodes` nodes (1 by default), which its completions name, as a run's do (the split-brain
analysis looks at nodes, so a history without them would cost less than a real one).

For each size the pure checker `checkers.listappend.check(txns, model)` is timed (generation is
timed apart), with its peak memory: the high-water mark of the process's resident set (VmHWM,
reset through /proc/self/clear_refs before each check) above the resident set just before it.
`--tracemalloc` adds an untimed pass that reports tracemalloc's peak of Python allocations,
`--profile N` a cProfile of the check at size N, and `--spark` times the whole pipeline,
`harness check history.jsonl --workload append` as a subprocess, for the sizes up to
`--spark-max`, with the peak resident sets of its Python process and of its JVM and the CPU
seconds of each and of Spark's Python workers (each read apart while they run), and the load
average as it began (a shared machine's other work shows up in the wall time).

    .venv/bin/python bench/listappend_scale.py [--sizes 10k,100k,1M] [--model serializable]
        [--strict] [--repeat 1] [--timeout 600] [--profile 100k] [--tracemalloc] [--spark]
        [--nodes 1] [--primaries 2 --nodes 2 --fork 0.5]
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import io
import itertools
import json
import math
import os
import pstats
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkers.listappend import check
from checkers.listappend.history import (
    Txn,
    completion,
    history_line,
    invocation,
    mops_of,
    write_history,
)
from workloads.append import Append
from workloads.base import WorkloadOptions

HARNESS = str(Path(sys.executable).parent / "harness")
US = 1_000  # ns
FINAL_PROCESS = 10_000_000  # as the runner numbers the final reads' process
START, APPLY, COMPLETE = 0, 1, 2


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def show_size(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


# --- the history ---------------------------------------------------------------------------------


def execute(store: dict[Any, list[Any]], value: list[list[Any]]) -> list[list[Any]]:
    """What workloads.append.Append.invoke does, against a dict instead of Postgres."""
    done = []
    for kind, key, arg in value:
        if kind == "r":
            done.append(["r", key, list(store.get(key, ()))])
        else:
            store.setdefault(key, []).append(arg)
            done.append(["append", key, arg])
    return done


def generate(*args: Any, **kwargs: Any) -> list[Txn]:
    """The transactions of `simulate` (its arguments), in the order they completed."""
    return [t for begun, t in simulate(*args, **kwargs) if not begun]


def stream_history(path: Path, *args: Any, **kwargs: Any) -> int:
    """The history file of `simulate` (its arguments), written as it goes: the same file
    write_history makes of `generate`'s transactions, without holding them (10M would not
    fit). Each event is written as its index is given, so the lines come in index order.
    Returns the transactions written."""
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for begun, t in simulate(*args, **kwargs):
            if begun:
                out.write(history_line(t.index, invocation(t)))
            else:
                out.write(history_line(t.complete, completion(t) or {}))
                count += 1
    return count


def simulate(
    n: int,
    concurrency: int,
    options: WorkloadOptions,
    seed: int,
    fail_rate: float,
    info_rate: float,
    final_read: bool,
    nodes: int = 0,
    primaries: int = 1,
    fork: float = 0.5,
) -> Iterator[tuple[bool, Txn]]:
    """`n` client transactions (plus the final read) from `concurrency` overlapping processes,
    each bound to one of `nodes` nodes (n1, n2, …) as a run's clients are, or to none.

    With `primaries` above 1 the history is a split brain: once `fork` of the transactions have
    begun, each of that many primaries goes on from a copy of the store, and a node's clients
    see only their own primary's (node i writes to primary i mod `primaries`), as two members
    that both took writes would. The final read sees the first primary's.

    An event simulation in ns: a process invokes, its transaction takes effect 0.3–2 ms later
    (all effects in time order, so serially), it completes 0.1–1 ms after that and invokes again
    within 0.2 ms. Indices are given in time order, as the history writer does. Yields
    (True, the transaction as invoked) as each begins, (False, the transaction) as it ends."""
    rng = random.Random(seed)
    workload = Append(options)
    stores: list[dict[Any, list[Any]]] = [{}]
    process = list(range(concurrency))
    pending: list[list[Any]] = [[] for _ in range(concurrency)]
    heap: list[tuple[int, int, int, int]] = []
    seq = itertools.count()
    for slot in range(concurrency):
        heapq.heappush(heap, (rng.randrange(100 * US), next(seq), slot, START))
    index = started = now = 0
    while heap:
        now, _, slot, phase = heapq.heappop(heap)
        if phase == START:
            if started >= n:
                continue
            started += 1
            _, value = workload.next_op(rng)
            pending[slot] = [index, now, value, None, None]
            yield True, Txn(index, index, process[slot], "invoke", now, None, mops_of(value))
            index += 1
            heapq.heappush(heap, (now + rng.randint(300 * US, 2000 * US), next(seq), slot, APPLY))
        elif phase == APPLY:
            value = pending[slot][2]
            if len(stores) < primaries and started >= fork * n:
                stores += [{k: list(v) for k, v in stores[0].items()} for _ in range(1, primaries)]
            store = stores[(slot % max(nodes, 1)) % len(stores)]
            u = rng.random()
            if u < fail_rate:
                outcome, result = "fail", value
            elif u < fail_rate + info_rate:
                outcome, result = "info", value
                if rng.random() < 0.5:
                    execute(store, value)
            else:
                outcome, result = "ok", execute(store, value)
            pending[slot][3:] = [outcome, result]
            heapq.heappush(
                heap, (now + rng.randint(100 * US, 1000 * US), next(seq), slot, COMPLETE)
            )
        else:
            invoked, start, _, outcome, result = pending[slot]
            node = f"n{slot % nodes + 1}" if nodes else None
            mops = mops_of(result)
            yield False, Txn(invoked, index, process[slot], outcome, start, now, mops, node)
            index += 1
            if outcome == "info":  # the runner's client becomes a new process
                process[slot] += concurrency
            heapq.heappush(heap, (now + rng.randint(0, 200 * US), next(seq), slot, START))
    if final_read:
        for _, value in workload.final_ops():
            start = now + 1000 * US
            result = execute(stores[0], value)
            now = start + 1000 * US
            node = "n1" if nodes else None
            yield True, Txn(index, index, FINAL_PROCESS, "invoke", start, None, mops_of(value))
            yield (
                False,
                Txn(index, index + 1, FINAL_PROCESS, "ok", start, now, mops_of(result), node),
            )
            index += 2


# --- measuring -----------------------------------------------------------------------------------


def _status_kib(field: str, pid: int | str = "self") -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(name, parent, CPU seconds so far) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, fields = text.split("(", 1)[1].rsplit(")", 1)
    rest = fields.split()
    return name, int(rest[1]), (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> dict[int, str]:
    """The processes below `pid` (its JVM, and the JVM's Python workers), by name."""
    found: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        stat = _stat(int(entry.name))
        if stat is not None:
            found[int(entry.name)] = stat[:2]
    below: dict[int, str] = {}
    for p, (name, _) in found.items():
        q = p
        while q in found and q != pid:
            q = found[q][1]
        if q == pid and p != pid:
            below[p] = name
    return below


@dataclass
class Usage:
    """What a `harness check` subprocess used: peak resident sets (MiB) and CPU seconds."""

    rss_mib: float | None = None  # the harness process's peak
    jvm_mib: float | None = None  # its JVM's peak
    cpu_harness: float = 0.0
    cpu_jvm: float = 0.0
    cpu_workers: float = 0.0  # Spark's Python workers (and their daemon)


def usage_while_running(proc: subprocess.Popen[bytes]) -> Usage:
    """Wait for `proc`, reading its processes' high-water marks and CPU times until they end (a
    child's cannot be read once it has been waited for): CPU seconds are the steadier figure on
    a shared machine, and they show where the time went."""
    peaks: dict[int, int] = {}
    cpu: dict[int, tuple[str, float]] = {}
    below: dict[int, str] = {}
    ticks = 0
    while proc.poll() is None:
        if ticks % 5 == 0:  # new processes are few: look for them once a second
            below = _descendants(proc.pid)
        ticks += 1
        for pid in [proc.pid, *below]:
            kib = _status_kib("VmHWM", pid)
            if kib is not None:
                peaks[pid] = max(peaks.get(pid, 0), kib)
            stat = _stat(pid)
            if stat is not None:
                cpu[pid] = (stat[0], stat[2])
        time.sleep(0.2)
    used = Usage()
    own = peaks.pop(proc.pid, None)
    used.rss_mib = own and own / 1024
    child = max(peaks.values(), default=None)
    used.jvm_mib = child and child / 1024
    for pid, (name, seconds) in cpu.items():
        if pid == proc.pid:
            used.cpu_harness = seconds
        elif name == "java":
            used.cpu_jvm += seconds
        else:
            used.cpu_workers += seconds
    return used


def reset_peak() -> bool:
    """Reset the resident-set high-water mark (Linux ≥ 4.0); False if it cannot be."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class CheckTimeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the check (between Python bytecodes) after `seconds`."""
    if not seconds:
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise CheckTimeout

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Timing:
    size: int
    model: str
    txns: int
    gen_s: float
    wall_s: float | None = None  # best of the repeats
    cpu_s: float | None = None
    walls: list[float] | None = None
    rss_mib: float | None = None  # peak resident set above the one before the check
    hwm_mib: float | None = None  # the process's peak resident set during the check
    traced_mib: float | None = None
    edges: int | None = None
    cyclic: dict[str, int] | None = None  # transactions in cycles, components, the largest
    valid: Any = None
    anomalies: list[str] | None = None
    error: str | None = None

    @property
    def us_per_txn(self) -> float | None:
        return None if self.wall_s is None else self.wall_s / self.txns * 1e6


def time_check(
    txns: list[Txn], t: Timing, budget: float, repeat: int, timeout: float | None
) -> None:
    walls = []
    for _ in range(repeat):
        before = _status_kib("VmRSS")
        can_reset = reset_peak()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            with time_limit(timeout):
                result = check(txns, t.model, budget)
        except CheckTimeout:
            t.error = f"timed out after {timeout:g} s"
            return
        except MemoryError:
            t.error = "MemoryError"
            return
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        hwm = _status_kib("VmHWM")
        walls.append(wall)
        if t.wall_s is None or wall < t.wall_s:
            t.wall_s, t.cpu_s = wall, cpu
        if can_reset and hwm is not None and before is not None:
            rss = (hwm - before) / 1024
            t.rss_mib = rss if t.rss_mib is None else max(t.rss_mib, rss)
            t.hwm_mib = max(t.hwm_mib or 0, hwm / 1024)
        t.edges, t.valid, t.cyclic = result["edge_count"], result["valid"], result["cyclic"]
        t.anomalies = result["anomaly_types"] + result["other_anomaly_types"]
        del result
    t.walls = walls


def traced_peak(txns: list[Txn], model: str, budget: float) -> float:
    """tracemalloc's peak of Python allocations during one (untimed) check, MiB."""
    tracemalloc.start()
    try:
        check(txns, model, budget)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def profile(txns: list[Txn], model: str, budget: float, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    check(txns, model, budget)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


@dataclass
class SparkRun:
    size: int
    txns: int
    write_s: float
    wall_s: float
    verdict: str
    load: float  # 1-minute load average as the check began
    used: Usage
    steps: dict[str, float]  # the pipeline's own seconds per step (results.json's `seconds`)


def spark_check(txns: list[Txn], model: str, keep: Path | None, size: int) -> SparkRun:
    """`harness check` of the history through the whole pipeline, timed as a subprocess."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=keep) as tmp:
        path = Path(tmp) / "history.jsonl"
        w0 = time.perf_counter()
        write_history(txns, path)
        return check_file(path, model, size, len(txns), time.perf_counter() - w0)


def check_file(path: Path, model: str, size: int, txns: int, write_s: float) -> SparkRun:
    """`harness check` of a written history, timed as a subprocess, its output beside it."""
    out = path.parent / f"check-{path.stem}-{model}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [HARNESS, "check", str(path), "--workload", "append", "--out", str(out)]
    cmd += ["--model", model]
    load = os.getloadavg()[0]
    with (path.parent / f"output-{path.stem}-{model}").open("w+") as output:
        c0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT)
        used = usage_while_running(proc)
        wall = time.perf_counter() - c0
        output.seek(0)
        text = output.read()
    results = out / "results.json"
    steps: dict[str, float] = {}
    if results.exists():
        found = json.loads(results.read_text())
        verdict, steps = found.get("verdict", "?"), found.get("seconds", {})
    else:
        verdict = f"exit {proc.returncode}: {text.strip()[-300:]}"
    return SparkRun(size, txns, write_s, wall, f"{model}: {verdict}", load, used, steps)


def streamed_check(
    n: int, models: list[str], args: argparse.Namespace, options: Any
) -> list[SparkRun]:
    """--spark-only: the history streamed to a file (10M transactions would not fit in this
    process as objects), kept under --tmp and used again when it is there, then checked."""
    folder = args.tmp or Path(tempfile.mkdtemp(prefix="listappend-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    shape = f"c{args.concurrency}-n{args.nodes}-s{args.seed}"
    if args.primaries > 1:
        shape += f"-p{args.primaries}-f{args.fork:g}"
    path = folder / f"history-{show_size(n)}-{shape}.jsonl"
    ready = path.with_suffix(".count")
    w0 = time.perf_counter()
    if ready.exists():
        txns = int(ready.read_text())
        print(f"\n{show_size(n)}: {txns} txns from {path}", flush=True)
    else:
        txns = stream_history(path, n, args.concurrency, options, args.seed, args.fail_rate,
                              args.info_rate, not args.no_final_read, args.nodes, args.primaries,
                              args.fork)  # fmt: skip
        ready.write_text(str(txns))
        print(f"\n{show_size(n)}: wrote {txns} txns to {path} in "
              f"{time.perf_counter() - w0:.1f} s", flush=True)  # fmt: skip
    write_s = time.perf_counter() - w0
    runs = []
    for model in models:
        runs.append(check_file(path, model, n, txns, write_s))
        print(f"  harness check: {runs[-1].wall_s:.1f} s, {runs[-1].verdict}", flush=True)
    if args.tmp is None:
        shutil.rmtree(folder, ignore_errors=True)
    return runs


# --- the report ----------------------------------------------------------------------------------


def checker_version() -> str:
    """The commit the checker comes from, and whether its files differ from it."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("log", "-1", "--format=%h %ci")
        dirty = git("status", "--porcelain", "checkers/listappend")
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit"
    return head + (" (checkers/listappend modified since)" if dirty else "")


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows: list[Timing], repeat: int) -> None:
    best = "best of " + str(repeat) if repeat > 1 else "one run"
    print(f"\nchecker: checkers.listappend.check(txns, model), wall time {best}")
    head = (
        f"{'size':>6} {'model':<20} {'txns':>9} {'gen s':>7} {'check s':>8} {'cpu s':>8} "
        f"{'txn/s':>9} {'µs/txn':>7} {'ΔRSS MiB':>9} {'peak MiB':>9} {'edges':>10}  verdict"
    )
    print(head)
    print("-" * len(head))
    for t in rows:
        rate = None if t.wall_s is None else t.txns / t.wall_s
        verdict = t.error or str(t.valid)
        if t.anomalies:
            verdict += " " + ",".join(t.anomalies)
        print(
            f"{show_size(t.size):>6} {t.model:<20} {t.txns:>9} {t.gen_s:>7.1f} "
            f"{fmt(t.wall_s, '8.2f')} {fmt(t.cpu_s, '8.2f')} {fmt(rate, '9,.0f')} "
            f"{fmt(t.us_per_txn, '7.1f')} {fmt(t.rss_mib, '9.0f')} {fmt(t.hwm_mib, '9.0f')} "
            f"{fmt(t.edges, '10d')}  {verdict}"
        )
        if t.walls and len(t.walls) > 1:
            print(f"{'':>6} runs: {', '.join(f'{w:.2f}' for w in t.walls)} s")
    if any(t.traced_mib is not None for t in rows):
        print("\ntracemalloc peak of Python allocations during the check (untimed pass):")
        for t in rows:
            if t.traced_mib is not None:
                print(f"  {show_size(t.size):>6} {t.model:<20} {t.traced_mib:8.0f} MiB")


def print_growth(rows: list[Timing]) -> None:
    print(
        "\ngrowth: time per transaction between sizes (×1.00 and k = 1 are linear, t ∝ n^k); "
        "cpu time is the steadier figure when the machine is shared"
    )
    by_model: dict[str, list[Timing]] = {}
    for t in rows:
        if t.wall_s is not None:
            by_model.setdefault(t.model, []).append(t)
    for model, ts in by_model.items():
        for a, b in itertools.pairwise(sorted(ts, key=lambda t: t.size)):
            ratio = b.us_per_txn / a.us_per_txn
            cpu_ratio = (b.cpu_s / b.txns) / (a.cpu_s / a.txns)
            k = math.log(b.wall_s / a.wall_s) / math.log(b.txns / a.txns)
            k_cpu = math.log(b.cpu_s / a.cpu_s) / math.log(b.txns / a.txns)
            mem = ""
            if a.rss_mib and b.rss_mib:
                mem = f", ΔRSS ×{b.rss_mib / a.rss_mib:.1f} for ×{b.txns / a.txns:.0f} txns"
            print(
                f"  {model:<20} {show_size(a.size):>5} → {show_size(b.size):<5} "
                f"wall µs/txn ×{ratio:.2f} (k = {k:.2f}), "
                f"cpu µs/txn ×{cpu_ratio:.2f} (k = {k_cpu:.2f}){mem}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10k,100k,1M", help="comma-separated: 10k,100k,1M")
    parser.add_argument("--model", default="serializable")
    parser.add_argument(
        "--strict", action="store_true", help="also check strict-serializable (realtime edges)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="timed checks per size; best kept")
    parser.add_argument("--budget", type=float, default=10.0, help="cycle search s per SCC")
    parser.add_argument("--timeout", type=float, default=None, help="give up a check after s")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument(
        "--nodes", type=int, default=1, help="nodes the clients are bound to (0: none recorded)"
    )
    parser.add_argument(
        "--primaries",
        type=int,
        default=1,
        help="above 1, a split brain: the nodes write to this many primaries after --fork",
    )
    parser.add_argument(
        "--fork", type=float, default=0.5, help="the share of the history before the split"
    )
    parser.add_argument("--keys", type=int, default=WorkloadOptions.key_count)
    parser.add_argument("--max-writes", type=int, default=WorkloadOptions.max_writes_per_key)
    parser.add_argument("--max-txn-length", type=int, default=WorkloadOptions.max_txn_length)
    parser.add_argument("--fail-rate", type=float, default=0.05)
    parser.add_argument("--info-rate", type=float, default=0.002)
    parser.add_argument("--no-final-read", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", default=None, help="cProfile the check at this size")
    parser.add_argument("--profile-top", type=int, default=20)
    parser.add_argument("--tracemalloc", action="store_true", help="add a tracemalloc pass")
    parser.add_argument("--spark", action="store_true", help="also time `harness check`")
    parser.add_argument("--spark-max", default="100k", help="largest size for --spark")
    parser.add_argument("--tmp", type=Path, default=None, help="where --spark writes histories")
    parser.add_argument(
        "--spark-only",
        action="store_true",
        help="no pure check: each history is streamed to a file and checked by `harness check` "
        "(for 10M, which would not fit in this process as objects); with --tmp the files are "
        "kept there and used again",
    )
    args = parser.parse_args()

    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    models = [args.model] + (["strict-serializable"] if args.strict else [])
    models = list(dict.fromkeys(models))
    options = WorkloadOptions(
        key_count=args.keys,
        max_writes_per_key=args.max_writes,
        max_txn_length=args.max_txn_length,
    )
    profile_size = parse_size(args.profile) if args.profile else None
    spark_max = parse_size(args.spark_max)
    load = os.getloadavg()[0]
    print(
        f"list-append checker scaling: {args.concurrency} processes on {args.nodes} node(s), "
        f"{args.keys} active keys, "
        f"≤{args.max_writes} appends/key, ≤{args.max_txn_length} mops/txn, "
        f"fail {args.fail_rate:g}, info {args.info_rate:g}, seed {args.seed}"
    )
    print(f"checker at {checker_version()}")
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f} at "
        "start (other work on the machine shows up as wall time above cpu time)"
    )

    rows: list[Timing] = []
    sparks: list[SparkRun] = []
    profiles: list[tuple[int, str, str]] = []
    for n in sizes:
        if args.spark_only:
            sparks += streamed_check(n, models, args, options)
            continue
        g0 = time.perf_counter()
        txns = generate(
            n,
            args.concurrency,
            options,
            args.seed,
            args.fail_rate,
            args.info_rate,
            not args.no_final_read,
            args.nodes,
            args.primaries,
            args.fork,
        )
        gen = time.perf_counter() - g0
        counts = {k: sum(1 for t in txns if t.type == k) for k in ("ok", "fail", "info")}
        mops = sum(len(t.mops) for t in txns)
        print(
            f"\n{show_size(n)}: generated {len(txns)} txns ({counts}), {mops} mops, in {gen:.1f} s",
            flush=True,
        )
        for model in models:
            t = Timing(n, model, len(txns), gen)
            time_check(txns, t, args.budget, args.repeat, args.timeout)
            print(
                f"  {model}: check {fmt(t.wall_s, '.2f')} s (cpu {fmt(t.cpu_s, '.2f')} s), "
                f"ΔRSS {fmt(t.rss_mib, '.0f')} MiB, valid {t.valid} {t.error or ''}".rstrip(),
                flush=True,
            )
            if t.cyclic and t.cyclic["txns"]:
                c = t.cyclic
                print(
                    f"    in cycles: {c['txns']} txns in {c['components']} component(s), the "
                    f"largest {c['largest']}, all decided: "
                    f"{'cycle-search-timeout' not in (t.anomalies or [])}",
                    flush=True,
                )
            if args.tracemalloc and t.error is None:
                t.traced_mib = traced_peak(txns, model, args.budget)
            if profile_size == n:
                profiles.append((n, model, profile(txns, model, args.budget, args.profile_top)))
            rows.append(t)
        if args.spark and n <= spark_max:
            for model in models:
                run = spark_check(txns, model, args.tmp, n)
                sparks.append(run)
                print(f"  harness check: {run.wall_s:.1f} s, {run.verdict}", flush=True)
                if run.steps:
                    steps = ", ".join(f"{k} {v:.1f}" for k, v in run.steps.items())
                    print(f"    its steps (s): {steps}", flush=True)
        del txns

    print_table(rows, args.repeat)
    print_growth(rows)
    if sparks:
        print("\nfull pipeline: `harness check history.jsonl --workload append` (a subprocess)")
        print(
            f"{'size':>6} {'txns':>9} {'write s':>8} {'check s':>8} {'txn/s':>9} "
            f"{'RSS MiB':>8} {'JVM MiB':>8} {'cpu: py':>8} {'JVM':>6} {'workers':>7} "
            f"{'load':>5}  verdict"
        )
        for r in sparks:
            u = r.used
            print(
                f"{show_size(r.size):>6} {r.txns:>9} {r.write_s:>8.1f} {r.wall_s:>8.1f} "
                f"{r.txns / r.wall_s:>9,.0f} {fmt(u.rss_mib, '8.0f')} {fmt(u.jvm_mib, '8.0f')} "
                f"{u.cpu_harness:>8.1f} {u.cpu_jvm:>6.1f} {u.cpu_workers:>7.1f} "
                f"{r.load:>5.2f}  {r.verdict}"
            )
        print(
            "(peak resident sets: RSS the harness process's, JVM its Spark JVM's, whose heap is "
            "capped at 4g; Spark's Python workers are not counted. CPU seconds of the harness "
            "process, its JVM and Spark's Python workers: on 2 cores the wall time is at least "
            "half their sum)"
        )
    for n, model, text in profiles:
        print(f"\ncProfile of the check, {show_size(n)} txns, {model}:")
        print(text)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
