"""The mutation score: of the small changes a regression could make to the reference daemons'
safety code, how many does a user's run catch? The planted bugs (`--bug`) are caught because the
checks were built around them; mutants are bugs nobody showed the harness.

Mutants are made by Cosmic Ray's operators (comparison, arithmetic, boolean and number
replacements, `not` added, loops run zero times, exceptions swapped, break and continue swapped),
one operator at one place in one of the files that decide safety (SAFETY below), with Cosmic Ray
as a library: it turns (file, operator, occurrence) into the mutated source, which is all this
needs. (mutmut would do too, but its mutants are all compiled into the code behind a switch read at
run time, which the daemons copied onto the nodes would have to carry.)

Each mutant of a seeded sample is run the way users run the cluster, one cluster at a time:

    harness run --nemesis all --time 120 --seed S [the file's options]

from a copy of `systems/` holding the mutated file (the harness copies the daemons onto the nodes
from there), seed after seed until a run is red: the mutant is then caught, by the checkers and
anomaly types that run names. A mutant no run catches is run against `tests/protocol` as well, so
that its row says whether any test notices it; survivors that change no behaviour (equivalent
mutants) are set apart by reading them, in mutants_equivalent.json beside this script (key →
why), and the score leaves them out. A mutant whose runs all fail to start the cluster is counted
as caught (no one ships it) but said apart.

`--files patroni/ha.py` (or any module of the pinned Patroni, as `patroni/…`) mutates Patroni
itself, as the patroni kind installs it: the module is read from the pinned wheel, and each run
puts the mutant in place of Patroni's own with `--patroni-patch` (under `--patroni-sync quorum`,
the mode Patroni's own Jepsen suite runs; give such runs `--time 300`, since Patroni fails over on
a 40 s scale). Those files are not in the default list.

Rows are appended to `--rows` (mutants_rows.jsonl beside this script) as each mutant ends, so
that hours of runs can be read while they go and resumed over several sittings (mutants already
there are skipped); `--table` prints the score with its 95 % interval and a row per mutant,
`--list` the sampled mutants and their changes without running them.

    nohup .venv/bin/python bench/mutants.py [--sample 40] [--sample-seed 1] [--seeds 0,1]
        [--same-as ROWS [--survivors]]
        [--time 120] [--nemesis all] [--files walkeeper/acceptor.py,…] > mutants.log 2>&1 &
    .venv/bin/python bench/mutants.py --table [--rows ROWS [--beside OTHER_ROWS …]]

`--budget M --strategy explore|explore-all|all` gives each mutant M minutes of `harness explore`
(of the aimed package alone, or of `--nemesis` with its aimed faults explored), or of runs of
`--nemesis` with fresh seeds; `--table --beside` puts strategies' rows of one sample side by side,
and bench/mutants_lockstep.sh makes their rows one mutant at a time, strategy after strategy.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cosmic_ray.plugins
from cosmic_ray.ast import ast_nodes, get_ast
from cosmic_ray.mutating import mutate_code
from run_rows import (
    anomalies,
    commit,
    first_anomaly_s,
    moments_reached,
    read_rows,
    rows_options,
    run_row,
    work_through,
)
from run_rows import table as markdown

import systems
from clusters.image import PATRONI_WHEEL, fetch_wheel

HERE = Path(__file__).resolve().parent
HARNESS = Path(sys.executable).parent / "harness"
PYTEST = Path(sys.executable).parent / "pytest"
# the strategies that give each mutant one `harness explore`: of `--nemesis aimed` alone, or of
# --nemesis (`all`) with its aimed faults chosen by the exploration
EXPLORING = ("explore", "explore-all")
EQUIVALENT = HERE / "mutants_equivalent.json"
# A score takes hours, run over several sittings: its rows are kept with the project, beside the
# mutants set apart as equivalent, rather than in results/ with the run folders.
ROWS = HERE / "mutants_rows.jsonl"
# The files that decide safety (under systems/), and the `harness run` options that put each to
# work: the limbo runs only under the confirm/rollback contract, the Manatee state on its own kind.
SAFETY: dict[str, tuple[str, ...]] = {
    "walkeeper/acceptor.py": (),
    "walkeeper/proposer.py": (),
    "walkeeper/termhistory.py": (),
    "walkeeper/storage.py": (),
    "walkeeper/compute.py": (),
    "walkeeper/limbo.py": ("--mode", "confirm-rollback"),
    "manatee/state.py": ("--cluster", "manatee"),
}
PATRONI = ("--cluster", "patroni", "--patroni-sync", "quorum")  # a module of Patroni's: patroni/…


def options_of(file: str) -> tuple[str, ...]:
    """The `harness run` options that put a file to work."""
    return PATRONI if is_patroni(file) else SAFETY[file]


def is_patroni(file: str) -> bool:
    return file.startswith("patroni/")


@functools.cache
def source_of(file: str) -> str:
    """The unmutated file: from systems/, or for a module of Patroni's, from the pinned wheel the
    patroni kind installs."""
    if is_patroni(file):
        with zipfile.ZipFile(fetch_wheel(PATRONI_WHEEL)) as wheel:
            return wheel.read(file).decode()
    return (systems.ROOT / file).read_text()


# Cosmic Ray's operators, as a regression would change a line: a comparison off by one or turned
# around, + and - or * and / swapped, a boolean or `not` flipped, a number one off, a loop run
# zero times, an exception handler that no longer catches, break and continue swapped. Left out:
# its other operator swaps (`+` to `<<`, `<` to `is`: a dozen per operator, which would fill any
# sample with code no one would write), string replacement (log lines and messages), and
# decorator removal (@dataclass dropped: the daemon fails to start, which says nothing).
OPERATORS = (
    "core/AddNot",
    "core/ExceptionReplacer",
    "core/NumberReplacer",
    "core/ReplaceAndWithOr",
    "core/ReplaceOrWithAnd",
    "core/ReplaceTrueWithFalse",
    "core/ReplaceFalseWithTrue",
    "core/ReplaceBreakWithContinue",
    "core/ReplaceContinueWithBreak",
    "core/ZeroIterationForLoop",
    "core/ReplaceUnaryOperator_Delete_Not",
    "core/ReplaceUnaryOperator_USub_UAdd",
    *(f"core/ReplaceBinaryOperator_{a}_{b}" for a, b in (
        ("Add", "Sub"), ("Sub", "Add"), ("Mul", "FloorDiv"), ("FloorDiv", "Mul"), ("Div", "Mul"),
        ("Mod", "FloorDiv"),
    )),
    *(f"core/ReplaceComparisonOperator_{a}_{b}" for a, b in (
        ("Lt", "LtE"), ("LtE", "Lt"), ("Gt", "GtE"), ("GtE", "Gt"), ("Lt", "Gt"), ("Gt", "Lt"),
        ("LtE", "GtE"), ("GtE", "LtE"), ("Eq", "NotEq"), ("NotEq", "Eq"), ("Is", "IsNot"),
        ("IsNot", "Is"),
    )),
)  # fmt: skip
COLUMNS = (
    ("file", "file"),
    ("line", "line"),
    ("operator", "operator"),
    ("change", "change"),
    ("caught", "caught"),
    ("by", "by"),
    ("first_anomaly_s", "first anomalous op s"),
    ("protocol_tests", "tests/protocol"),
)


@dataclass(frozen=True)
class Mutant:
    """One operator applied at one place of one file (its `occurrence`: Cosmic Ray counts the
    places an operator can apply in a file in the order it walks the tree)."""

    file: str  # under systems/, or patroni/… in Patroni's wheel
    operator: str
    occurrence: int
    line: int
    source: str  # digest of the unmutated file: a mutant's key lapses when the file changes

    @property
    def key(self) -> str:
        return f"{self.file}@{self.source}:{self.operator}:{self.occurrence}"

    def mutated(self) -> str:
        code = source_of(self.file)
        operator = cosmic_ray.plugins.get_operator(self.operator)()
        changed = mutate_code(code, operator, self.occurrence)
        if changed is None:
            raise ValueError(f"{self.key} applies nowhere in {self.file}")
        return changed

    def change(self) -> str:
        """The lines the mutant changes, as "before → after"."""
        before = source_of(self.file).splitlines()
        after = self.mutated().splitlines()
        old, new = [], []
        for line in difflib.ndiff(before, after):
            if line.startswith("- "):
                old.append(line[2:].strip())
            elif line.startswith("+ "):
                new.append(line[2:].strip())
        return f"{' / '.join(old) or '(none)'} → {' / '.join(new) or '(none)'}"


def operators() -> list[str]:
    known = set(cosmic_ray.plugins.operator_names())
    missing = [name for name in OPERATORS if name not in known]
    if missing:
        raise SystemExit(f"Cosmic Ray has no operator {', '.join(missing)}: is it 8.7?")
    return list(OPERATORS)


def mutants_of(file: str, names: list[str]) -> list[Mutant]:
    """Every mutant of one file, operator by operator."""
    code = source_of(file)
    source = hashlib.sha1(code.encode()).hexdigest()[:10]
    tree = get_ast(code)
    found = []
    for name in names:
        operator = cosmic_ray.plugins.get_operator(name)()
        places = [
            start for node in ast_nodes(tree) for start, _ in operator.mutation_positions(node)
        ]
        found += [Mutant(file, name, i, line, source) for i, (line, _) in enumerate(places)]
    return found


def same_as(rows: list[dict[str, Any]], names: list[str]) -> tuple[list[Mutant], list[str]]:
    """The mutants of earlier rows, found again in today's files by file, operator and the change
    they make: an edit elsewhere in a file moves a mutant's line and occurrence and changes its
    key, not what it does. Those no longer found (their line was edited) are returned apart."""
    found: list[Mutant] = []
    gone: list[str] = []
    of_file: dict[str, list[Mutant]] = {}
    for row in rows:
        if row["file"] not in of_file:
            of_file[row["file"]] = mutants_of(row["file"], names)
        lines = source_of(row["file"]).splitlines()
        before = row["change"].split(" → ")[0]
        candidates = [
            m
            for m in of_file[row["file"]]
            if m.operator == row["operator"] and lines[m.line - 1].strip() == before
        ]
        same = [m for m in candidates if m.change() == row["change"]]
        if same:
            found.append(min(same, key=lambda m: abs(m.line - row["line"])))
        else:
            gone.append(row["key"])
    return found, gone


def sample(mutants: list[Mutant], size: int, seed: int) -> list[Mutant]:
    """A seeded sample: the first `size` of a seeded shuffle, so that a larger sample of the same
    seed holds the smaller one (its rows are kept)."""
    order = sorted(mutants, key=lambda m: m.key)
    random.Random(seed).shuffle(order)
    return order[:size]


def wilson(caught: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion: honest for small samples and for
    proportions near 0 or 1, where the normal approximation is not."""
    if total == 0:
        return 0.0, 1.0
    p = caught / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def tree_with(mutant: Mutant, work: Path) -> Path:
    """A copy of systems/ with the mutated file, under `work`; the folder to put on PYTHONPATH."""
    root = work / "tree"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(systems.ROOT, root / "systems", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "systems" / mutant.file).write_text(mutant.mutated())
    env = env_with(root)
    probe = subprocess.run(
        [sys.executable, "-P", "-c", "import systems; print(systems.ROOT)"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if Path(probe) != root / "systems":
        raise RuntimeError(f"the harness would deploy {probe}, not the mutated copy")
    return root


def patch_with(mutant: Mutant, work: Path) -> Path:
    """A `--patroni-patch` folder under `work` holding the mutated module of Patroni's."""
    target = work / "patch" / mutant.file.removeprefix("patroni/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(mutant.mutated())
    return work / "patch"


def env_with(root: Path) -> dict[str, str]:
    """This environment with the mutated copy first on the path (a PYTHONPATH already set, as
    for a score of another checkout of the harness, stays behind it); as it is for a mutant of
    Patroni's, which its runs find in their options."""
    if not (root / "systems").is_dir():
        return dict(os.environ)
    path = [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def read_run(run: Path) -> dict[str, Any]:
    results = json.loads((run / "results.json").read_text())
    return {
        "verdict": results.get("verdict"),
        "anomalies": anomalies(results),
        "first_anomaly_s": first_anomaly_s(results),
        "moments": moments_reached(results),
    }


def protocol_tests(root: Path) -> str:
    """Whether tests/protocol, run against the mutated copy, fails: the pytest script, not
    `python -m pytest`, which would put this checkout's systems/ first on the path."""
    done = subprocess.run(
        [str(PYTEST), "-q", "-x", "-p", "no:cacheprovider", "--import-mode=append",
         str(HERE.parent / "tests" / "protocol")],
        env=env_with(root), cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    return "pass" if done.returncode == 0 else "fail"


def explored(
    mutant: Mutant, args: argparse.Namespace, root: Path, options: list[str]
) -> list[dict[str, Any]]:
    """`harness explore` of the mutant for --budget minutes, in a store of its own (a fresh
    corpus): a row per run it made, each with the minutes from the exploration's start."""
    store = args.store / f"explore-{mutant.key.replace('/', '-').replace(':', '-')}"
    nemesis = "aimed" if args.strategy == "explore" else args.nemesis  # explore-all: --nemesis's
    cmd = [str(HARNESS), "explore", "--budget", str(args.budget), "--time", str(args.time),
           "--nemesis", nemesis, "--seed", str(args.seeds[0]), "--store", str(store),
           *options]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env_with(root))
    minutes = round((time.monotonic() - started) / 60, 1)
    corpora = sorted((store / "explore").glob("*.json"))
    made = json.loads(corpora[-1].read_text())["runs"] if corpora else []
    runs, spent = [], 0.0
    for made_run in made:
        spent += made_run.get("minutes") or 0.0
        run = Path(str(made_run.get("run")))
        base = {"seed": made_run["seed"], "minutes": round(spent, 1), "date": time.strftime(
            "%Y-%m-%d"), "commit": commit(), "run": str(run)}  # fmt: skip
        runs.append(base | (read_run(run) if (run / "results.json").is_file() else
                            {"verdict": "error"}))  # fmt: skip
    if not runs:
        said = (done.stderr or done.stdout).strip()[-300:]
        runs = [{"verdict": "error", "anomalies": said, "minutes": minutes,
                 "date": time.strftime("%Y-%m-%d"), "commit": commit()}]  # fmt: skip
    return runs


def try_mutant(mutant: Mutant, args: argparse.Namespace) -> dict[str, Any]:
    """The mutant's runs, seed after seed until one is red (or, with --budget, until its
    minutes are spent; explored by `harness explore` with --strategy explore); then its row."""
    row: dict[str, Any] = asdict(mutant) | {"key": mutant.key, "change": mutant.change()}
    options = [*options_of(mutant.file), *args.options.split()]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="harness-mutant-") as work:
        root = Path(work)
        if is_patroni(mutant.file):
            options += ["--patroni-patch", str(patch_with(mutant, root))]
        else:
            root = tree_with(mutant, root)
        seeds: Any = args.seeds
        if args.budget is not None and args.strategy in EXPLORING:
            runs, seeds = explored(mutant, args, root, options), []
        elif args.budget is not None:  # fresh seeds until the budget is spent
            seeds = itertools.count(args.seeds[0])
        began = time.monotonic()
        for seed in seeds:
            if (
                args.budget is not None
                and runs
                and ((time.monotonic() - began) / 60 + runs[-1]["minutes"] > args.budget)
            ):
                break
            cmd = [str(HARNESS), "run", "--nemesis", args.nemesis, "--time", str(args.time),
                   "--seed", str(seed), *options]  # fmt: skip
            name = f"mutant-{mutant.source}-{mutant.occurrence}-{mutant.operator.split('/')[-1]}"
            run = run_row(cmd, args.store, f"{name}-s{seed}", {"seed": seed}, read_run,
                          env=env_with(root))  # fmt: skip
            runs.append(run)
            if run.get("verdict") == "invalid":
                break
        red = [r for r in runs if r.get("verdict") == "invalid"]
        if args.budget is not None:
            row |= {"strategy": args.strategy, "budget_min": args.budget}
        if args.same_as is None:
            row["sample_seed"] = args.sample_seed
        if red:
            caught = runs.index(red[0]) + 1
            to_catch = sum(r.get("minutes") or 0.0 for r in runs[:caught])
            if args.strategy in EXPLORING and args.budget is not None:
                to_catch = red[0].get("minutes") or 0.0  # counted from the exploration's start
            row |= {
                "minutes_to_catch": round(to_catch, 1),
                "caught": f"run {caught}",
                "by": "; ".join(red[0]["anomalies"]),
                "first_anomaly_s": red[0]["first_anomaly_s"],
            }
        elif all(r.get("verdict") == "error" for r in runs):
            row |= {"caught": "cluster failed", "by": runs[-1].get("anomalies", "")[-200:]}
        else:
            tests = "n/a" if is_patroni(mutant.file) else protocol_tests(root)
            row |= {"caught": "survived", "protocol_tests": tests}
    return row | {"runs": runs, "date": runs[-1]["date"], "commit": runs[-1]["commit"]}


def score(rows: list[dict[str, Any]], equivalent: dict[str, str]) -> str:
    """The score line: caught of the mutants not set apart as equivalent, with its interval."""
    counted = [r for r in rows if not set_apart(r, equivalent)]
    caught = [r for r in counted if r["caught"] != "survived"]
    failed = sum(r["caught"] == "cluster failed" for r in counted)
    low, high = wilson(len(caught), len(counted))
    share = len(caught) / len(counted) if counted else 0.0
    return (
        f"caught {len(caught)} of {len(counted)} mutants: {share * 100:.0f} % (95 % interval "
        f"{low * 100:.0f}–{high * 100:.0f} %); {failed} of them by a cluster that did not start; "
        f"{len(rows) - len(counted)} set apart as equivalent"
    )


def set_apart(row: dict[str, Any], equivalent: dict[str, str]) -> str:
    """Why the row's mutant is equivalent ("" if it is not), under its key or the key it had
    when it was found equivalent (`was`: rows of `--same-as`)."""
    return equivalent.get(row["key"]) or equivalent.get(row.get("was", "")) or ""


def table(rows: list[dict[str, Any]], equivalent: dict[str, str]) -> str:
    shown = [
        r | {"caught": "equivalent: " + set_apart(r, equivalent)} if set_apart(r, equivalent) else r
        for r in rows
    ]
    return score(rows, equivalent) + "\n\n" + markdown(COLUMNS, shown)


def outcome(row: dict[str, Any] | None) -> str:
    """One strategy's cell: caught and in how many minutes, survived, or not yet run."""
    if row is None:
        return "not run"
    if row["caught"] in ("survived", "cluster failed"):
        return row["caught"]
    return f"caught in {row.get('minutes_to_catch', '?')} min: {row.get('by', '')}"


def side_by_side(strategies: list[list[dict[str, Any]]], equivalent: dict[str, str]) -> str:
    """Strategies on the same mutants (their rows keyed alike): a score line each, then a row
    per mutant with each strategy's outcome, so that what the seeds' luck was worth shows."""
    names = [rows[0].get("strategy", f"#{n + 1}") if rows else f"#{n + 1}"
             for n, rows in enumerate(strategies)]  # fmt: skip
    by_key = [{r["key"]: r for r in rows} for rows in strategies]
    keys = list(dict.fromkeys(r["key"] for rows in strategies for r in rows))
    shown = []
    for key in keys:
        row = next(rows[key] for rows in by_key if key in rows)
        apart = set_apart(row, equivalent)
        shown.append(row | {
            name: "equivalent: " + apart if apart else outcome(rows.get(key))
            for name, rows in zip(names, by_key, strict=True)
        })  # fmt: skip
    every = [k for k in keys if all(k in rows for rows in by_key)]
    lines = [f"{name}: {score(rows, equivalent)}" for name, rows in zip(names, strategies,
                                                                        strict=True)]  # fmt: skip
    lines.append(f"run under every one: {len(every)}")
    columns = (("file", "file"), ("line", "line"), ("change", "change"),
               *((name, name) for name in names))  # fmt: skip
    return "\n".join(lines) + "\n\n" + markdown(columns, shown)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=40, help="mutants in the sample")
    parser.add_argument("--sample-seed", type=int, default=1, help="the sample's seed")
    parser.add_argument("--files", default=",".join(SAFETY), help="files under systems/")
    parser.add_argument("--seeds", default="0,1", help="the run seeds to try, in order")
    parser.add_argument("--time", type=float, default=120.0, help="seconds of each run")
    parser.add_argument("--nemesis", default="all")
    parser.add_argument("--options", default="", help="more `harness run` options for each run")
    parser.add_argument("--list", action="store_true", help="print the sample, run nothing")
    parser.add_argument(
        "--budget",
        type=float,
        help="minutes each mutant is given: runs with fresh seeds from the first of --seeds "
        "until one is red or the minutes are spent (instead of --seeds alone)",
    )
    parser.add_argument(
        "--strategy",
        choices=("all", *EXPLORING),
        default="all",
        help="with --budget: repeated runs of --nemesis (all), `harness explore` (of aimed "
        "faults alone), or `harness explore --nemesis` (all's faults, the aimed ones explored)",
    )
    parser.add_argument(
        "--same-as",
        type=Path,
        help="the mutants of this earlier rows file, found again in today's files (to measure "
        "the same mutants after a change of the harness), instead of a sample",
    )
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="with --same-as: only the mutants that survived there and are not equivalent (a "
        "checker added can only catch more; a change of the faults needs them all)",
    )
    parser.add_argument(
        "--beside",
        type=Path,
        action="append",
        help="with --table: the rows of another strategy on the same mutants, in a column beside "
        "(repeatable)",
    )
    rows_options(parser, "mutants", ROWS)
    args = parser.parse_args()
    equivalent = json.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else {}
    if args.table and args.beside:
        strategies = [read_rows(args.rows), *(read_rows(rows) for rows in args.beside)]
        print(side_by_side(strategies, equivalent))
        return 0
    if args.table:
        print(table(read_rows(args.rows), equivalent))
        return 0
    files = args.files.split(",")
    unknown = sorted(f for f in set(files) - set(SAFETY) if not is_patroni(f))
    if unknown:
        parser.error(f"no safety file {', '.join(unknown)}; there are {', '.join(SAFETY)}")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    names = operators()
    was: dict[str, str] = {}  # a re-found mutant's key → its key in the --same-as rows
    if args.same_as:
        earlier = read_rows(args.same_as)
        if args.survivors:
            earlier = [
                r for r in earlier if r["caught"] == "survived" and not set_apart(r, equivalent)
            ]
        chosen, gone = same_as(earlier, names)
        kept = [r for r in earlier if r["key"] not in gone]  # in the order they were found
        was = {m.key: r["key"] for m, r in zip(chosen, kept, strict=True)}
        for key in gone:
            print(f"not found again (its line was edited): {key}")
    else:
        chosen = sample(
            [m for f in files for m in mutants_of(f, names)], args.sample, args.sample_seed
        )
    if args.list:
        for m in chosen:
            print(f"{m.file}:{m.line} {m.operator}#{m.occurrence}: {m.change()}")
        return 0
    by_key = {m.key: m for m in chosen}
    # a mutant read and set apart as equivalent needs no runs: its row is the reading's
    apart = [m for m in chosen if set_apart({"key": m.key, "was": was.get(m.key, "")}, equivalent)]
    for m in apart:
        print(f"set apart as equivalent, not run: {m.key}")
    started = time.monotonic()
    work_through(
        args.rows,
        [(m.key,) for m in chosen if m not in apart],
        lambda row: (row["key"],),
        lambda key: try_mutant(by_key[key], args) | ({"was": was[key]} if key in was else {}),
        lambda row: f"{row['caught']} {row.get('by', '')} ({row['change']})",
        args.until,
    )
    print(f"\n{(time.monotonic() - started) / 3600:.1f} h\n")
    print(table([r for r in read_rows(args.rows) if r["key"] in by_key], equivalent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
