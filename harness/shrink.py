"""`harness shrink RUN`: a red run cut down to the fewest faults, the fewest seconds and the
lightest load that still show its anomaly, and how often that shortest command shows it.

A candidate is the run's configuration with a schedule of faults replayed exactly
(nemesis/replay.py), a `--time`, a number of workers and a rate. A candidate *shows* the anomaly
when one of `repeats` runs of it has an anomaly of a kept type (clusters are not deterministic:
one run in three may be all a real bug gives). From the original, in turn:

1. the faults that began before the first kept anomaly's last operation, alone, and `--time`
   cut to just after them and it (a cheap first cut: what came after the evidence rarely made
   it, and every later try is then short);
2. delta debugging over the faults (Zeller's ddmin): halves, then quarters and so on, and each
   complement, keeping whatever still shows the anomaly, down to a schedule from which no single
   fault can be dropped;
3. the faults that remain moved earlier, the quiet stretches between them closed to a few
   seconds, and `--time` cut to just after the last of them (one that lasted to the run's end
   keeps its length);
4. half the workers, again and again, then half the rate, while the anomaly still shows.

Each step keeps the smallest candidate so far, written to the shrink's folder as it goes
(`schedule.json`, `command.txt`, `shrink.json`), so a budget spent or a Ctrl-C leaves what was
found. The search is a pure function of a `shows` predicate, as a checker is of a history: the
runs live in the CLI.
"""

from __future__ import annotations

import dataclasses
import html
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.verdict import EXIT_INTERRUPTED, EXIT_UNKNOWN, EXIT_VALID
from harness.config import SCHEDULE, RunConfig
from nemesis.replay import FORMAT, VERSION, Entry

LEAD_S = 2.0  # the first fault starts this long after the clients, once moved earlier
GAP_S = 3.0  # at most this long between one fault's end and the next one's start, once closed
TAIL_S = 5.0  # --time runs this long past the last fault's end, once cut
MIN_RATE = 10.0  # the lowest rate tried (operations a second, over all workers)


@dataclass(frozen=True)
class Candidate:
    """One configuration to try: its faults, --time, --concurrency and --rate."""

    faults: tuple[Entry, ...]
    time_limit: float
    concurrency: int
    rate: float

    def size(self) -> tuple[int, float, int, float]:
        """What is smaller first: fewer faults, then fewer seconds, workers and operations (a
        rate of 0 is as fast as the workers go: the most)."""
        return (len(self.faults), self.time_limit, self.concurrency, self.rate or float("inf"))

    def summary(self) -> str:
        rate = "as fast as possible" if self.rate == 0 else f"rate {self.rate:g}"
        return (f"{len(self.faults)} faults, {self.time_limit:g} s, {self.concurrency} workers, "
                f"{rate}")  # fmt: skip


class OutOfBudget(Exception):
    """The shrink's minutes are spent: the smallest candidate so far is the answer."""


class Search:
    """The steps above over a `shows` predicate, within `budget_s` seconds; `found` is told of
    each smaller candidate that shows the anomaly, `say` of each try."""

    def __init__(
        self,
        shows: Callable[[Candidate], bool],
        budget_s: float,
        found: Callable[[Candidate], None] = lambda c: None,
        say: Callable[[str], None] = lambda s: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._shows = shows
        self.deadline = clock() + budget_s
        self.clock = clock
        self.found = found
        self.say = say
        self.tried = 0
        self.seen: dict[Candidate, bool] = {}

    def shows(self, candidate: Candidate) -> bool:
        """Whether the candidate shows the anomaly (each asked once)."""
        if candidate in self.seen:
            return self.seen[candidate]
        if self.clock() >= self.deadline:
            raise OutOfBudget
        self.tried += 1
        self.say(f"try {self.tried}: {candidate.summary()}")
        shown = self.seen[candidate] = self._shows(candidate)
        return shown

    def run(self, original: Candidate, evidence_s: float | None = None) -> Candidate:
        """The smallest candidate found that shows the anomaly (the original if none is)."""
        self.best = original
        try:
            if evidence_s is not None:
                early = tuple(f for f in original.faults if f.start_s <= evidence_s)
                seconds = max(cut_time(early, original), round(evidence_s + TAIL_S, 1))
                self._keep(dataclasses.replace(
                    original, faults=early, time_limit=min(original.time_limit, seconds)
                ))  # fmt: skip
            base = self.best
            ddmin(
                list(base.faults),
                lambda fs: self._keep(dataclasses.replace(base, faults=tuple(fs))),
            )
            closed = closed_up(bounded(self.best.faults, self.best.time_limit))
            self._keep(dataclasses.replace(
                self.best, faults=closed, time_limit=cut_time(closed, self.best)
            ))  # fmt: skip
            while self.best.concurrency > 1 and self._keep(
                dataclasses.replace(self.best, concurrency=max(1, self.best.concurrency // 2))
            ):
                pass
            while (self.best.rate == 0 or self.best.rate > MIN_RATE) and self._keep(
                dataclasses.replace(self.best, rate=slower(self.best.rate))
            ):
                pass
        except OutOfBudget:
            self.say("the budget is spent: the smallest so far is the answer")
        return self.best

    def _keep(self, candidate: Candidate) -> bool:
        """Whether the candidate shows the anomaly; the best so far when it is also smaller
        (`found` is told)."""
        if candidate == self.best:
            return True
        if not self.shows(candidate):
            return False
        if candidate.size() < self.best.size():
            self.best = candidate
            self.found(candidate)
        return True


def slower(rate: float) -> float:
    """Half the rate (an unlimited one first becomes the default 100), never below MIN_RATE."""
    return 100.0 if rate == 0 else max(MIN_RATE, round(rate / 2, 1))


def ddmin(items: list[Entry], fits: Callable[[list[Entry]], bool]) -> list[Entry]:
    """Zeller's delta debugging: a sublist of `items` that still `fits`, from which no single
    item can be dropped (1-minimal), found by trying chunks and their complements at ever finer
    granularity; `items` is taken to fit. `fits` may raise to stop the search."""
    n = 2
    while len(items) >= 2:
        chunks = split(items, n)
        smaller = next((c for c in chunks if fits(c)), None)
        if smaller is not None:
            items, n = smaller, 2
            continue
        if n > 2:  # at two chunks each complement is the other chunk, tried already
            rests = ([x for j, c in enumerate(chunks) if j != i for x in c] for i in range(n))
            rest = next((r for r in rests if fits(r)), None)
            if rest is not None:
                items, n = rest, max(n - 1, 2)
                continue
        if n >= len(items):
            break
        n = min(len(items), 2 * n)
    if len(items) == 1 and fits([]):
        return []
    return items


def split(items: Sequence[Entry], n: int) -> list[list[Entry]]:
    """`items` in `n` contiguous chunks of near-equal size, in order."""
    size, extra = divmod(len(items), n)
    chunks, at = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        if step:
            chunks.append(list(items[at : at + step]))
        at += step
    return chunks


def closed_up(faults: Sequence[Entry]) -> tuple[Entry, ...]:
    """The faults in their order, the first LEAD_S into the run and each quiet stretch between
    one and the next closed to GAP_S at most; faults that overlapped keep their offsets."""
    moved: list[Entry] = []
    shift = 0.0
    reach = None  # where the faults so far end, before and after the move
    for f in sorted(faults, key=lambda e: e.start_s):
        end = f.stop_s if f.stop_s is not None else f.start_s
        if reach is None:
            shift = min(0.0, LEAD_S - f.start_s)
        elif f.start_s > reach[0]:  # after a quiet stretch: close it
            shift = reach[1] + min(GAP_S, f.start_s - reach[0]) - f.start_s
        stop = None if f.stop_s is None else round(f.stop_s + shift, 3)
        moved.append(Entry(round(f.start_s + shift, 3), stop, f.plan))
        new_end = stop if stop is not None else round(f.start_s + shift, 3)
        reach = (end, new_end) if reach is None or end > reach[0] else reach
    return tuple(moved)


def bounded(faults: Sequence[Entry], until: float) -> tuple[Entry, ...]:
    """The faults with each that the run's heal ended (no stop of its own) stopping at `until`,
    the run's end, as it did: moved earlier, it keeps its length and the run can end sooner
    (a run under `--nemesis all` mostly ends with a fault in place)."""
    return tuple(f if f.stop_s is not None else Entry(f.start_s, until, f.plan) for f in faults)


def cut_time(faults: Sequence[Entry], best: Candidate) -> float:
    """--time just past the last fault's end (a fault the heal ends keeps the time it had; no
    fault, TAIL_S alone)."""
    if not faults:
        return TAIL_S
    if any(f.stop_s is None for f in faults):
        return best.time_limit
    return min(best.time_limit, round(max(f.stop_s or 0.0 for f in faults) + TAIL_S, 1))


# The runs behind the predicate, and what the shrink leaves behind.

REPORT = """<!doctype html><meta charset="utf-8"><title>shrink of {source}</title>
<style>body{{font:14px sans-serif;margin:2em;max-width:70em}}td,th{{padding:.3em .8em;
border-bottom:1px solid #ddd;text-align:left;vertical-align:top}}code{{background:#f4f4f4}}</style>
<h1>{verdict}</h1><p>The red run <code>{source}</code> cut down to the shortest command that still
shows {kept}; that command showed it in {shown} of {confirm} runs.</p>
<pre><code>{command}</code></pre>
<table><tr><th></th><th>original</th><th>minimal</th></tr>{rows}</table>
<h2>The minimal schedule</h2><table><tr><th>from (s)</th><th>to (s)</th><th>fault</th></tr>
{faults}</table><h2>What the minimal command showed</h2>{anomalies}
<p>{tried} candidates tried in {minutes:.1f} min.</p>"""


def anomaly_types(results: dict[str, Any]) -> set[str]:
    """A checked run's anomalies, each as `checker:type`."""
    return {f"{name}:{kind}" for name, checker in (results.get("checkers") or {}).items()
            for kind in checker.get("anomaly_types") or []}  # fmt: skip


def kept_types(results: dict[str, Any], keep: Sequence[str]) -> set[str]:
    """The anomalies to keep: those given (`TYPE` or `checker:TYPE`), or every one the run
    showed; a type it did not show is bad input."""
    shown = anomaly_types(results)
    if not keep:
        return shown
    chosen = {s for s in shown for k in keep if s == k or s.split(":", 1)[1] == k}
    if missing := [k for k in keep if not any(s == k or s.split(":", 1)[1] == k for s in shown)]:
        raise BadInput(f"the run showed no {missing[0]} anomaly: it showed "
                       f"{', '.join(sorted(shown))}")  # fmt: skip
    return chosen


def evidence_s(results: dict[str, Any], kept: set[str]) -> float | None:
    """When the first kept anomaly had all its evidence: its last operation's end (s)."""
    ends = []
    for name, checker in (results.get("checkers") or {}).items():
        for anomaly in checker.get("anomalies") or []:
            if f"{name}:{anomaly.get('type')}" not in kept:
                continue
            ops = [op for op in anomaly.get("ops") or [] if isinstance(op, dict)]
            times = [t for op in ops for t in (op.get("complete_time"), op.get("invoke_time"))
                     if t is not None] or list(anomaly.get("window_ns") or [])  # fmt: skip
            if times:
                ends.append(max(times) / 1e9)
    return min(ends) if ends else None


def run_args(cfg: RunConfig) -> list[str]:
    """`harness run`'s options that make this configuration again (its faults aside)."""
    flags = ["--cluster", cfg.cluster]
    for key, value in sorted(cfg.cluster_options.items()):
        if value is not None:
            flags += [f"--{key.replace('_', '-')}", str(value)]
    if cfg.backend != "docker":
        flags += ["--backend", cfg.backend]
    flags += ["--workload", ",".join(cfg.workloads), "--isolation", cfg.isolation]
    if cfg.model:
        flags += ["--model", cfg.model]
    for flag, value, default in (
        ("--op-timeout", cfg.op_timeout, 5.0), ("--op-pause", cfg.op_pause_ms, 0.0),
        ("--settle", cfg.settle, 5.0), ("--cancel-after", cfg.cancel_after, None),
        ("--max-recovery", cfg.max_recovery, None),
    ):  # fmt: skip
        if value != default:
            flags += [flag, f"{value:g}"]
    flags += ["--time", f"{cfg.time_limit:g}", "--concurrency", str(cfg.concurrency),
              "--rate", f"{cfg.rate:g}", "--seed", str(cfg.seed)]  # fmt: skip
    return flags


def write_schedule(path: Path, candidate: Candidate, cluster: str, nodes: Sequence[str],
                   source: str) -> None:  # fmt: skip
    path.write_text(json.dumps({
        "format": FORMAT, "version": VERSION, "cluster": cluster, "nodes": list(nodes),
        "source": source, "faults": [f.as_json() for f in candidate.faults],
    }, indent=1) + "\n")  # fmt: skip


def report(folder: Path, summary: dict[str, Any]) -> None:
    """The side-by-side page: the original and the minimal, the command, its schedule."""
    o, m = summary["original"], summary["minimal"]
    rows = "".join(
        f"<tr><th>{html.escape(label)}</th><td>{html.escape(str(o[key]))}</td>"
        f"<td>{html.escape(str(m[key]))}</td></tr>"
        for label, key in (("faults", "faults"), ("seconds", "time"), ("workers", "concurrency"),
                           ("rate", "rate"), ("anomalies", "anomalies"), ("run", "run"))
    )  # fmt: skip
    faults = "".join(
        f"<tr><td>{f['start_s']:g}</td><td>{'heal' if f['stop_s'] is None else f['stop_s']}</td>"
        f"<td><code>{html.escape(json.dumps(f['plan']))}</code></td></tr>"
        for f in m["schedule"]
    )
    shown = "".join(f"<li><b>{html.escape(a['type'])}</b>: {html.escape(a['explanation'])}"
                    f"</li>" for a in summary["explained"]) or "<p>none</p>"  # fmt: skip
    page = REPORT.format(
        source=html.escape(summary["source"]), kept=html.escape(", ".join(summary["kept"])),
        shown=summary["shown"], confirm=summary["confirm"],
        verdict="reproduced" if summary["shown"] else "not reproduced",
        command=html.escape(summary["command"]), rows=rows, faults=faults,
        anomalies=f"<ul>{shown}</ul>", tried=summary["tried"], minutes=summary["minutes"],
    )  # fmt: skip
    (folder / "report.html").write_text(page)


class Interrupted(Exception):
    """Ctrl-C ended a run of the shrink: what was found is kept."""


def config_of(run: Path) -> RunConfig:
    """The configuration a run folder's config.json records."""
    try:
        saved = json.loads((run / "config.json").read_text())
        fields = {f.name for f in dataclasses.fields(RunConfig)}
        cfg = RunConfig(**{k: v for k, v in saved.items() if k in fields})
    except (OSError, ValueError, TypeError) as e:
        raise BadInput(f"{run / 'config.json'} is not a run's configuration: {e}") from e
    return dataclasses.replace(cfg, store=Path(cfg.store))


def shrink_run(
    run: Path,
    keep: Sequence[str],
    repeats: int,
    confirm: int,
    budget_min: float,
    run_one: Callable[[RunConfig], Any],
    say: Callable[[str], None],
) -> int:
    """Shrink a red run folder (module docstring); `run_one` runs and checks one configuration
    (an Outcome: its folder, its exit code, whether Ctrl-C ended it). Exit: 0 the minimal
    command showed a kept anomaly again, 2 it did not, 130 interrupted (what was found kept)."""
    from clusters.registry import cluster_kind
    from nemesis import replay

    for name, value, least in (("--repeats", repeats, 1), ("--confirm", confirm, 1)):
        if value < least:
            raise BadInput(f"{name} must be at least {least}, got {value}")
    if budget_min <= 0:
        raise BadInput(f"--budget must be positive minutes, got {budget_min:g}")
    history, results_file = run / "history.jsonl", run / "results.json"
    if not history.is_file() or not (run / "config.json").is_file():
        raise BadInput(f"{run} is no run folder (it has no history.jsonl and config.json)")
    if not results_file.is_file():
        raise BadInput(f"{run} was never checked: run `harness check {run}` first")
    results = json.loads(results_file.read_text())
    if results.get("verdict") != "invalid":
        raise BadInput(f"{run} is {results.get('verdict')}: only a red run has an anomaly to keep")
    kept = kept_types(results, keep)
    cfg = config_of(run)
    kind = cluster_kind(cfg.cluster)
    options = kind.checked_options(cfg.cluster_options)
    nodes = [f"n{i}" for i in range(1, kind.nodes_needed(options) + 1)]
    events = [json.loads(line) for line in history.read_text().splitlines()
              if line.strip().endswith("}")]  # fmt: skip
    schedule = replay.schedule_of(events, kind.name, nodes, str(run))
    faults = replay.entries(schedule, nodes, replay.replaying_on(kind, options))
    folder = run.parent.parent / "shrink" / f"{run.parent.name}-{run.name}"
    folder.mkdir(parents=True, exist_ok=True)
    original = Candidate(tuple(faults), cfg.time_limit, cfg.concurrency, cfg.rate)
    tries = iter(range(1, 1_000_000))
    last: dict[str, Any] = {}

    def shows(candidate: Candidate, times: int = repeats) -> int:
        """How many of `times` runs of the candidate showed a kept anomaly (stopping at the
        first that did, when asked for repeats)."""
        path = folder / "candidate.json"
        write_schedule(path, candidate, kind.name, nodes, str(run))
        shown = 0
        for _ in range(times):
            number = next(tries)
            tried = dataclasses.replace(
                cfg, nemesis=[SCHEDULE], chains=None, schedule=replay.read_schedule(path),
                time_limit=candidate.time_limit, concurrency=candidate.concurrency,
                rate=candidate.rate, store=folder / "runs", name=f"try{number:03d}",
                keep_cluster=False,
            )  # fmt: skip
            outcome = run_one(tried)
            if outcome.interrupted:
                raise Interrupted
            done = outcome.run_dir / "results.json" if outcome.run_dir else None
            got = json.loads(done.read_text()) if done and done.is_file() else {}
            if kept & anomaly_types(got):
                shown += 1
                last.update(run=str(outcome.run_dir), results=got)
                if times == repeats:
                    break
        say(f"  {'shows' if shown else 'does not show'} {', '.join(sorted(kept))}")
        return shown

    def found(candidate: Candidate) -> None:
        write_schedule(folder / "schedule.json", candidate, kind.name, nodes, str(run))
        (folder / "command.txt").write_text(command(candidate) + "\n")
        say(f"smallest so far: {candidate.summary()}")

    def command(candidate: Candidate) -> str:
        minimal = dataclasses.replace(
            cfg, time_limit=candidate.time_limit, concurrency=candidate.concurrency,
            rate=candidate.rate,
        )  # fmt: skip
        return " ".join(["harness", "run", *run_args(minimal), "--schedule",
                         str(folder / "schedule.json")])  # fmt: skip

    began = time.monotonic()
    say(f"shrinking {run}: keeping {', '.join(sorted(kept))}; {original.summary()}; "
        f"{repeats} runs a candidate at most, {budget_min:g} min")  # fmt: skip
    search = Search(lambda c: shows(c) > 0, budget_min * 60, found, say)
    found(original)
    try:
        best = search.run(original, evidence_s(results, kept))
        say(f"confirming: {confirm} runs of {best.summary()}")
        last.clear()
        shown = shows(best, confirm)
    except Interrupted:
        say(f"interrupted; the smallest found so far is kept in {folder}")
        return EXIT_INTERRUPTED
    explained = [
        {"type": a.get("type"), "explanation": a.get("explanation", "")}
        for checker in (last.get("results", {}).get("checkers") or {}).values()
        for a in (checker.get("anomalies") or [])[:3]
    ]
    summary = {
        "source": str(run), "kept": sorted(kept), "confirm": confirm, "shown": shown,
        "rate": round(shown / confirm, 2), "command": command(best), "tried": search.tried,
        "minutes": round((time.monotonic() - began) / 60, 1), "explained": explained,
        "original": side(original, sorted(anomaly_types(results)), str(run)),
        "minimal": side(best, sorted(anomaly_types(last.get("results") or {})),
                        last.get("run", "")),
    }  # fmt: skip
    (folder / "shrink.json").write_text(json.dumps(summary, indent=1) + "\n")
    report(folder, summary)
    (folder / "candidate.json").unlink(missing_ok=True)
    say(f"minimal: {best.summary()} (from {original.summary()}); it showed "
        f"{', '.join(sorted(kept))} in {shown} of {confirm} runs")  # fmt: skip
    say(f"replay: {command(best)}")
    say(f"report: {folder / 'report.html'}")
    return EXIT_VALID if shown else EXIT_UNKNOWN


def side(candidate: Candidate, anomalies: list[str], run: str) -> dict[str, Any]:
    """One column of the side-by-side table."""
    return {
        "faults": len(candidate.faults), "time": candidate.time_limit,
        "concurrency": candidate.concurrency, "rate": candidate.rate,
        "anomalies": ", ".join(anomalies) or "none", "run": run,
        "schedule": [f.as_json() for f in candidate.faults],
    }  # fmt: skip
