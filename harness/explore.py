"""`harness explore`: many short runs against one configuration, each aimed at what no run has
reached yet, until a run is red or the budget is spent.

A seed's schedule meets a given chain of faults by luck: a pair of 120 s runs meets one aimed
scenario about half the time (bench/schedule_odds.py), and the second link of a chain almost
never. Exploration steers instead, as Mallory steers its nemesis by the states a system reached:
it keeps the union of the steps and pairs of steps every run reached (a corpus file under the
store, so an exploration resumes where the last one stopped), and for each run it draws many
candidate chains from the kind's moments, roles and strikes (and, on a kind that can have them,
the seeds' histories, chains written by hand) and gives the run those that would reach the most
that is new: a pair of moments never reached counts most, then a step never
reached, each worth less the more often it was tried and not reached. Every run is a plain
`harness run --nemesis aimed --chains …` (or `--nemesis all --chains …`, the aimed faults among
all the others), its chains recorded in its config.json, so a red one is replayed by the
command printed for it.

The corpus: {"config": the configuration explored, "steps": {step: times}, "pairs": {pair:
times}, "tried": {a planned step or pair of moments: times tried without reaching it}, "runs":
[{"run", "seed", "verdict", "minutes", "steps", "pairs", "new_pairs"}]}.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from checkers.moments import PAIR, Moment, moment_of
from core import store
from core.errors import BadInput
from core.verdict import EXIT_INTERRUPTED
from harness.check import worst
from harness.config import RunConfig
from nemesis import AIMED
from nemesis.aimed import ANY, Aimed
from nemesis.seed003 import PlacedHistory

Chain = Aimed | PlacedHistory  # what a run is given: drawn from the moments, or a seed's history

EXPLORE = "explore"  # the folder under the store where the corpora are kept
CANDIDATES = 400  # chains drawn for each run, of which the most novel are given
NEW_PAIR = 4.0  # what a pair of moments never reached is worth, against a new step's 1
NEW_STEP_PAIR = 2.0  # ... and a pair of steps never reached
EXIT_VALID, EXIT_INVALID = 0, 1


@dataclass
class Corpus:
    """What the runs of an exploration reached, kept between explorations of one
    configuration."""

    path: Path
    config: dict[str, Any]
    steps: dict[str, int] = field(default_factory=dict)
    pairs: dict[str, int] = field(default_factory=dict)
    tried: dict[str, int] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, store_dir: Path, config: dict[str, Any]) -> Corpus:
        """The corpus of this configuration in the store, empty if none was kept."""
        key = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
        path = store_dir / EXPLORE / f"{config['cluster']}-{key}.json"
        if not path.is_file():
            return cls(path, config)
        try:
            doc = json.loads(path.read_text())
        except ValueError as e:
            raise BadInput(f"the corpus {path} is not JSON ({e}): move it aside") from e
        return cls(
            path,
            config,
            doc.get("steps") or {},
            doc.get("pairs") or {},
            doc.get("tried") or {},
            doc.get("runs") or [],
        )

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"config": self.config, "steps": self.steps, "pairs": self.pairs}
        store.write_json(self.path, doc | {"tried": self.tried, "runs": self.runs})

    def moment_pairs(self) -> set[tuple[str, str]]:
        found = set()
        for key in self.pairs:
            a, _, b = key.partition(PAIR)
            found.add((moment_of(a), moment_of(b)))
        return found

    def learn(self, chains: dict[str, Any], given: Sequence[Chain]) -> int:
        """Add a run's reached steps and pairs (the cluster-state checker's `chains`), and
        count as tried what the chains given aimed at and did not reach, of those the run
        started (the first `chains["chains"]`: they start in turn); the number of pairs new to
        the corpus."""
        new = sum(1 for key in chains.get("pairs") or {} if key not in self.pairs)
        for key, count in (chains.get("steps") or {}).items():
            self.steps[key] = self.steps.get(key, 0) + count
        for key, count in (chains.get("pairs") or {}).items():
            self.pairs[key] = self.pairs.get(key, 0) + count
        reached = self.moment_pairs()
        for chain in given[: chains.get("chains") or 0]:
            for target in targets(chain):
                if target not in self.steps and _as_pair(target) not in reached:
                    self.tried[target] = self.tried.get(target, 0) + 1
        return new


def _as_pair(target: str) -> tuple[str, str] | None:
    a, sep, b = target.partition(">")
    return (a, b) if sep else None


def targets(chain: Chain) -> list[str]:
    """What a chain aims at, as the corpus counts it: its first step (moment:role:strike, with
    the first role it tries) and each pair of moments "A>B" it names (a step aimed at any
    moment names none)."""
    if isinstance(chain, PlacedHistory):
        steps = chain.steps()
        first, names = ":".join(steps[0]), [moment for moment, _, _ in steps]
    else:
        first = f"{chain.moment.name}:{chain.roles[0]}:{chain.strike}"
        names = [chain.moment.name, *(s.moment.name if s.moment else ANY for s in chain.then)]
    pairs = [f"{a}>{b}" for a, b in itertools.pairwise(names) if ANY not in (a, b)]
    return [first, *pairs]


def links(chain: Chain) -> int:
    """How many steps follow the chain's first."""
    return len(chain.steps()) - 1 if isinstance(chain, PlacedHistory) else len(chain.then)


def novelty(chain: Chain, corpus: Corpus, planned: set[str]) -> float:
    """What the chain would add to the corpus: each pair of moments and step it aims at that
    no run reached (nor a chain already planned for this run), each worth less the more often
    it was tried and not reached."""
    reached = corpus.moment_pairs()
    worth = 0.0
    for target in targets(chain):
        pair = _as_pair(target)
        new = pair not in reached if pair else target not in corpus.steps
        if new and target not in planned:
            worth += (NEW_PAIR if pair else 1.0) / (1 + corpus.tried.get(target, 0))
    return worth + NEW_STEP_PAIR * (links(chain) > 0) / (1 + len(corpus.pairs))


def choose(
    corpus: Corpus,
    moments: tuple[type[Moment], ...],
    nodes: list[str],
    count: int,
    rng: random.Random,
) -> list[Chain]:
    """`count` chains for the next run: of CANDIDATES drawn as the aimed package draws them
    (the seeds' histories among them, where the kind can have them), the most novel in turn,
    each counting what those before it aim at as reached."""
    candidates: list[Chain] = []
    while len(candidates) < CANDIDATES:
        drawn = Aimed.planned(nodes, rng, moments)
        if isinstance(drawn, Aimed | PlacedHistory):
            candidates.append(drawn)
    chosen: list[Chain] = []
    planned: set[str] = set()
    for _ in range(count):
        best = max(candidates, key=lambda c: (novelty(c, corpus, planned), links(c)))
        candidates.remove(best)
        chosen.append(best)
        planned.update(targets(best))
    return chosen


def chains_per_run(time_limit: float, interval: float, share: float = 1.0) -> int:
    """How many chains a run of `time_limit` s meets, a quiet gap and a fault each taking an
    interval on average and `share` of the faults the aimed package's, and one more in case
    the faults are short."""
    return max(1, round(time_limit * share / (2 * interval))) + 1


def sparse_chains(cluster: str, time_limit: float, interval: float, share: float) -> str | None:
    """The warning for a run that meets less than one chain on average (the aimed package's
    share of a mixed schedule, faults on a slow kind's timescale): most runs would then be
    the other packages' schedules alone, and the exploration would steer almost nothing."""
    met = time_limit * share / (2 * interval)
    if share >= 1.0 or met >= 1.0:
        return None
    return (
        f"a run of {time_limit:g} s on {cluster} meets {met:.1f} chains on average: its faults "
        f"come one every {2 * interval:g} s and the aimed package draws {share:.0%} of them, so "
        "most runs will strike no chosen chain. --nemesis aimed gives every fault to the chains, "
        "a longer --time gives each run more"
    )


@dataclass
class Outcome:
    run_dir: Path | None
    code: int  # the run's verdict as an exit code
    chains: dict[str, Any]  # the cluster-state checker's steps and pairs
    interrupted: bool = False


def explore(
    base: RunConfig,
    budget_min: float,
    moments: tuple[type[Moment], ...],
    nodes: list[str],
    count: int,
    run_one: Callable[[RunConfig], Outcome],
    console: Console,
) -> int:
    """Run until a run is red (exit 1) or the budget is spent (0, or 2 if some run could not
    be decided); each run `base` with the next seed and the `count` chains chosen for it."""
    corpus = Corpus.open(base.store, corpus_key(base))
    began = time.monotonic()
    codes: list[int] = []
    rows: list[tuple[float, int, int, int]] = []
    last_min = 0.0
    number = 0
    console.print(
        f"exploring {base.cluster} for {budget_min:g} min: {count} chains a run of "
        f"{base.time_limit:g} s; the corpus {corpus.path} holds {len(corpus.steps)} steps and "
        f"{len(corpus.pairs)} pairs from {len(corpus.runs)} runs"
    )
    while True:
        elapsed = (time.monotonic() - began) / 60
        if number and elapsed + last_min > budget_min:
            break
        seed = base.seed + len(corpus.runs)
        rng = random.Random(f"explore:{base.seed}:{len(corpus.runs)}")
        given = choose(corpus, moments, nodes, count, rng)
        cfg = RunConfig(**{**vars(base), "seed": seed, "chains": [c.spec() for c in given]})
        number += 1
        console.rule(
            f"run {number} (seed {seed}), {elapsed:.1f} of {budget_min:g} min: "
            + "; ".join(" → ".join(targets(c)) for c in given[:3])
            + (" …" if len(given) > 3 else "")
        )
        start = time.monotonic()
        outcome = run_one(cfg)
        last_min = (time.monotonic() - start) / 60
        if outcome.interrupted:
            corpus.save()
            console.print(f"interrupted; the corpus is kept: {corpus.path}")
            return EXIT_INTERRUPTED
        new = corpus.learn(outcome.chains, given)
        verdict = {EXIT_VALID: "valid", EXIT_INVALID: "invalid"}.get(outcome.code, "unknown")
        corpus.runs.append(
            {
                "run": str(outcome.run_dir),
                "seed": seed,
                "verdict": verdict,
                "minutes": round(last_min, 2),
                "steps": len(outcome.chains.get("steps") or {}),
                "pairs": len(outcome.chains.get("pairs") or {}),
                "new_pairs": new,
            }
        )
        corpus.save()
        codes.append(outcome.code)
        elapsed = (time.monotonic() - began) / 60
        rows.append((elapsed, number, len(corpus.steps), len(corpus.pairs)))
        console.print(
            f"run {number}: {verdict}; {new} new pairs; the corpus holds {len(corpus.steps)} "
            f"steps and {len(corpus.pairs)} pairs; {max(0.0, budget_min - elapsed):.1f} min left"
        )
        if outcome.code == EXIT_INVALID:
            console.print(
                f"[red]red run:[/] {outcome.run_dir}\n"
                f"replay: harness run {replay_args(cfg)} --chains {outcome.run_dir}/config.json"
            )
            break
    print_coverage(console, rows)
    return EXIT_INVALID if EXIT_INVALID in codes else worst(codes)


def corpus_key(cfg: RunConfig) -> dict[str, Any]:
    """What makes two explorations the same: the cluster, its options, the workloads and the
    backend (not the seed, the time or the store)."""
    key = {
        "cluster": cfg.cluster,
        "options": dict(sorted(cfg.cluster_options.items())),
        "workloads": list(cfg.workloads),
        "backend": cfg.backend,
        "isolation": cfg.isolation,
    }
    # the nemesis and the append workload's shape, where they are not the default (so older
    # corpora still match): what `all` reaches beside the chains is not what `aimed` reaches
    if cfg.nemesis != [AIMED]:
        key["nemesis"] = list(cfg.nemesis)
    return key | {name: value for name, value in _shape(cfg) if value != getattr(DEFAULT, name)}


DEFAULT = RunConfig()


def _shape(cfg: RunConfig) -> list[tuple[str, int]]:
    return [(n, getattr(cfg, n)) for n in ("key_count", "max_writes_per_key", "max_txn_length")]


def replay_args(cfg: RunConfig) -> str:
    """The run command's options that make this run again, but its chains."""
    flags = [f"--cluster {cfg.cluster}"]
    flags += [
        f"--{k.replace('_', '-')} {v}"
        for k, v in sorted(cfg.cluster_options.items())
        if v is not None
    ]
    flags += [
        f"--workload {','.join(cfg.workloads)}",
        f"--nemesis {','.join(cfg.nemesis)}",
        f"--time {cfg.time_limit:g}",
        f"--seed {cfg.seed}",
    ]
    if cfg.nemesis_interval is not None:
        flags.append(f"--nemesis-interval {cfg.nemesis_interval:g}")
    flags += [
        f"--{name.replace('_', '-')} {value}"
        for name, value in _shape(cfg)
        if value != getattr(DEFAULT, name)
    ]
    return " ".join(flags)


def print_coverage(console: Console, rows: Iterable[tuple[float, int, int, int]]) -> None:
    table = Table(title="coverage over time", title_justify="left")
    for column in ("minutes", "runs", "distinct steps", "distinct pairs"):
        table.add_column(column, justify="right")
    for minutes, runs, steps, pairs in rows:
        table.add_row(f"{minutes:.1f}", str(runs), str(steps), str(pairs))
    console.print(table)
