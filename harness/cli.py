"""The `harness` command: run tests, re-check histories, manage clusters by hand.

Exit codes (DESIGN.md): 0 valid · 1 anomalies · 2 unknown · 254 bad arguments or input ·
255 harness or infrastructure error · 130 interrupted (the history is kept and can be checked).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from clusters.registry import all_kind_options, kind_summaries
from clusters.registry import kind_options as registry_kind_options
from core import store
from core.contract import LEGACY, Contract
from core.errors import BadInput, InfraError
from core.verdict import EXIT_BAD_INPUT, EXIT_INFRA, EXIT_INTERRUPTED
from harness.config import SCHEDULE, RunConfig, split_names
from nemesis import ALL, NONE, PACKAGES, replay
from workloads.base import WorkloadOptions

console = Console(stderr=False, highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def backend_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--backend and the options that describe its nodes, shared by run and cluster commands."""
    options = [
        click.option(
            "--backend",
            default="docker",
            show_default=True,
            help="Where nodes come from: docker (containers), local (namespaces on this "
            "machine, root), ssh (existing hosts).",
        ),
        click.option(
            "--node",
            "nodes",
            multiple=True,
            help="ssh: a host, [root@]HOST[:PORT][,PORT=REACHABLE_PORT]; repeat for each node.",
        ),
        click.option(
            "--nodes-file",
            type=click.Path(path_type=Path),
            help="ssh: a file of hosts, one per line.",
        ),
        click.option("--ssh-key", type=click.Path(path_type=Path), help="ssh: private key."),
        click.option(
            "--known-hosts",
            type=click.Path(path_type=Path),
            help="ssh: known_hosts file (default: the system's and ~/.ssh/known_hosts).",
        ),
        click.option(
            "--ssh-insecure", is_flag=True, help="ssh: accept any host key (not checked)."
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def kind_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options only one cluster kind takes (e.g. --safekeepers), declared by the kinds."""
    for option in reversed(all_kind_options()):
        choice = click.Choice(option.spellings) if option.choices else option.type
        f = click.option(option.flag, option.name, type=choice, default=None, help=option.help)(f)
    return f


def kind_settings(kind: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Pop the kind-specific options out of a command's options, checked against `kind`."""
    return registry_kind_options(kind, {o.name: opts.pop(o.name) for o in all_kind_options()})


def backend_settings(opts: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Pop the backend options out of a command's options: (name, keyword options)."""
    name = str(opts.pop("backend"))
    settings = {
        k: opts.pop(k) for k in ("nodes", "nodes_file", "ssh_key", "known_hosts", "ssh_insecure")
    }
    settings["nodes"] = list(settings["nodes"])
    return name, {k: v for k, v in settings.items() if v}


store_option = click.option(
    "--store",
    default="results",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Results store folder.",
)


junit_option = click.option(
    "--junit",
    default=None,
    type=click.Path(path_type=Path),
    help="Write JUnit XML here: one test case per run, anomalies as failures.",
)


def spark_master_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--spark-master",
        default=None,
        envvar="HARNESS_SPARK_MASTER",
        help=f"Spark master for {what} (default local[*]).",
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def cli() -> None:
    """A Jepsen-style fault-injection harness for replicated Postgres.

    `harness run` deploys a cluster in Docker, drives workloads through Postgres while a nemesis
    injects faults, records every operation in results/<test>/<time>/history.jsonl, checks the
    history and writes results.json and report.html. The exit code is the verdict: 0 valid,
    1 anomalies found, 2 unknown, 254 bad input, 255 harness or infrastructure error.
    """


@cli.command()
@click.option(
    "--cluster",
    default="safekeeper",
    show_default=True,
    help="Cluster kind to deploy: " + kind_summaries() + ".",
)
@kind_options
@backend_options
@click.option(
    "--workload",
    "workloads",
    default="bank,append",
    show_default=True,
    help="Comma-separated workloads sharing the workers: bank, append, set.",
)
@click.option(
    "--nemesis",
    default="none",
    show_default=True,
    help="Comma-separated fault packages: " + ", ".join([NONE, *PACKAGES, ALL]) + ".",
)
@click.option(
    "--nemesis-interval",
    type=float,
    default=None,
    help="Mean seconds between faults, and each fault's mean length (default: 10, or the "
    "cluster kind's failover time where that is longer, e.g. Patroni's TTL and loop, each "
    "fault then outlasting it).",
)
@click.option(
    "--chains",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A JSON file of aimed chains or seeds' histories (a list, or a run's config.json: "
    "`harness explore` writes the chains it chose there): the aimed package's faults, in turn, "
    "instead of drawn from the seed. --nemesis is then aimed unless given.",
)
@click.option(
    "--schedule",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A schedule of faults to replay exactly, each at its second of the run and on the "
    "same roles (`harness export RUN --format schedule` writes a run's), instead of drawing "
    "them; leave --nemesis out.",
)
@click.option(
    "--time",
    "time_limit",
    default=60.0,
    show_default=True,
    help="Seconds of workload before healing and final reads.",
)
@click.option(
    "--rate",
    default=100.0,
    show_default=True,
    help="Operations per second over all workers (0: as fast as possible).",
)
@click.option("--concurrency", default=10, show_default=True, help="Number of workers.")
@click.option(
    "--seed",
    default=0,
    show_default=True,
    help="Seed of the generator (and nemesis): same seed, same operations.",
)
@click.option(
    "--isolation",
    default="serializable",
    show_default=True,
    help="Transaction isolation: serializable, repeatable-read, read-committed.",
)
@click.option(
    "--model",
    default=None,
    help="Consistency model append histories are checked against, as Elle names them "
    "(read-committed, snapshot-isolation, serializable, strict-serializable, strong-session-…); "
    "default: what --isolation promises, with real-time order on a cluster with one primary "
    "(single, safekeeper: serializable is held to strict-serializable, repeatable-read to "
    "strong-snapshot-isolation), where a read that begins after a COMMIT returned must see it.",
)
@click.option(
    "--op-timeout",
    default=5.0,
    show_default=True,
    help="Seconds before an operation is abandoned (its outcome then unknown).",
)
@click.option(
    "--op-pause",
    type=float,
    default=0.0,
    show_default=True,
    help="Milliseconds: the most a transaction pauses, at random, between two of its statements "
    "(Jepsen's widening of the windows in which transactions overlap).",
)
@click.option(
    "--key-count",
    type=int,
    default=WorkloadOptions.key_count,
    show_default=True,
    help="append: keys in flight at once (Jepsen's key-count); more keys, fewer transactions "
    "in conflict.",
)
@click.option(
    "--max-writes-per-key",
    type=int,
    default=WorkloadOptions.max_writes_per_key,
    show_default=True,
    help="append: appends to a key before it retires and a fresh key takes its place.",
)
@click.option(
    "--max-txn-length",
    type=int,
    default=WorkloadOptions.max_txn_length,
    show_default=True,
    help="append: the most micro-operations (appends and reads) in one transaction.",
)
@click.option(
    "--cancel-after",
    type=float,
    default=None,
    help="Seconds after which every client cancels a statement that has not returned, COMMIT "
    "included, as an application or a pool does (off by default). A COMMIT cancelled while it "
    "waited for a synchronous standby returns success with a WARNING: recorded ok, with the "
    "warning.",
)
@click.option(
    "--settle",
    default=5.0,
    show_default=True,
    help="Seconds to let the cluster recover after healing, before the final reads.",
)
@click.option(
    "--max-recovery",
    type=float,
    default=None,
    help="Seconds free of faults the cluster may take to acknowledge a write again after a "
    "fault heals (or in any stretch without a fault); beyond that the run is invalid "
    "(slow-recovery, write-stall). Off by default; the figures are in every report.",
)
@store_option
@click.option("--name", default=None, help="Test name (default: cluster-workloads-nemesis).")
@click.option("--keep-cluster", is_flag=True, help="Leave the cluster up after the run.")
@spark_master_option("the analysis")
@click.option(
    "--test-count",
    default=1,
    show_default=True,
    help="Run the test N times, with seeds --seed … --seed+N-1, then gate them all.",
)
@click.option(
    "--matrix",
    default=None,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A TOML file of runs (workloads × nemeses × modes × seeds; see the README): run "
    "each in turn, then gate them all.",
)
@junit_option
def run(**opts: Any) -> None:
    """Run one test end to end and exit with its verdict.

    With --test-count or --matrix, run many one after another, check each, print a table of
    them all and exit with the worst verdict."""
    from checkers.spark.session import SMALL_OPS, start_spark
    from harness.check import check_paths
    from harness.runner import Runner

    count, matrix, junit = opts.pop("test_count"), opts.pop("matrix"), opts.pop("junit")
    if count != 1 or matrix is not None or junit is not None:
        from harness.matrix import expand, repeat, run_many

        ctx = click.get_current_context()
        runs = expand(matrix, opts, ctx.command, ctx) if matrix is not None else [opts]
        sys.exit(run_many([run_config(dict(r)) for r in repeat(runs, count)], junit, console))
    cfg = run_config(opts)
    runner = Runner(cfg, console)  # the configuration checked before anything starts
    # The check's JVM boots while the cluster deploys (a wait on the nodes): the check finds
    # it up rather than waiting seconds for it at the end.
    start_spark(cfg.spark_master, small=0 < cfg.rate * cfg.time_limit <= SMALL_OPS)
    result = runner.run()
    if result.interrupted:
        err.print(f"interrupted; the history is kept: `harness check {result.run_dir}` analyses it")
        sys.exit(EXIT_INTERRUPTED)
    console.print("[dim]checking the history[/]")
    sys.exit(check_paths([result.run_dir], None, None, cfg.spark_master, console))


# what `harness explore` does not take of `harness run`'s options: it chooses the faults, and
# runs until its budget is spent or a run is red
NOT_EXPLORED = ("test_count", "matrix", "junit", "nemesis", "chains", "schedule", "keep_cluster")
STEERED = ("aimed", "all")  # the packages whose aimed faults explore can choose


def explore_command(**opts: Any) -> None:
    """Many short runs against one configuration, each aimed at steps and pairs of steps no run
    has reached yet (the union kept in a corpus under the store, so an exploration resumes),
    until a run is red or --budget minutes are spent.

    Each run is `harness run --nemesis aimed --chains …` with the next seed (--time is each
    run's seconds); with --nemesis all, `harness run --nemesis all --chains …`: every fault of
    `all`, its aimed ones chosen so. The chains a run was given are in its config.json. Prints
    each run's verdict and what it added, and at the end the coverage over time. Exit: 1 a red
    run was found (its folder and the command that replays it are printed), 0 the budget ran
    out with every run valid, 2 a run could not be decided, 255 a run failed."""
    from clusters.registry import cluster_kind
    from harness.explore import chains_per_run, explore, sparse_chains
    from harness.runner import Runner
    from nemesis import aimed_share
    from nemesis.schedule import timescale

    budget = float(opts.pop("budget"))
    if budget <= 0:
        raise BadInput(f"--budget must be positive minutes, got {budget:g}")
    names = split_names(str(opts["nemesis"]))
    if not set(names) & set(STEERED):
        raise BadInput(
            f"explore chooses the aimed package's faults; --nemesis {opts['nemesis']} has none: "
            "give --nemesis aimed, or all (or a list with one of them)"
        )
    cfg = run_config(opts | {"chains": None, "keep_cluster": False})
    probe = Runner(cfg, console)  # the configuration checked before the first run starts
    kind = cluster_kind(cfg.cluster)
    options = probe.plan.options
    nodes = [f"n{i + 1}" for i in range(kind.nodes_needed(options))]
    interval = timescale(kind.failover_s(options), cfg.nemesis_interval)[0]
    share = aimed_share(
        names, len(nodes), probe.backend.power, kind.coordinated_with(options),
        probe.plan.moments, kind,
    )  # fmt: skip
    count = chains_per_run(cfg.time_limit, interval, share)
    if warning := sparse_chains(cfg.cluster, cfg.time_limit, interval, share):
        console.print(f"[yellow]{warning}[/]")
    code = explore(cfg, budget, probe.plan.moments, nodes, count, explored_run, console)
    sys.exit(code)


def explored_run(cfg: RunConfig) -> Any:
    """One run of an exploration, checked: its verdict and the steps and pairs it reached."""
    from harness.check import check_paths
    from harness.explore import Outcome
    from harness.runner import Runner

    runner = Runner(cfg, console)
    try:
        result = runner.run()
    except InfraError as e:
        console.print(f"[red]the run failed:[/] {e}")
        return Outcome(runner.run_dir, EXIT_INFRA, {})
    if result.interrupted:
        return Outcome(result.run_dir, EXIT_INTERRUPTED, {}, interrupted=True)
    code = check_paths([result.run_dir], None, None, cfg.spark_master, console)
    results = result.run_dir / store.RESULTS
    state = json.loads(results.read_text())["checkers"].get("cluster-state") or {}
    return Outcome(result.run_dir, code, state.get("chains") or {})


def read_chains(path: Path | None) -> list[dict[str, Any]] | None:
    """The chains a `--chains` file gives: a JSON list of them, or a run's config.json."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise BadInput(f"cannot read the chains file {path}: {e.strerror}") from e
    except ValueError as e:
        raise BadInput(f"{path} is not JSON: {e}") from e
    chains = doc.get("chains") if isinstance(doc, dict) else doc
    if not isinstance(chains, list) or not all(isinstance(c, dict) for c in chains):
        raise BadInput(f"{path} holds no list of chains (a JSON list, or a run's config.json)")
    return chains


def run_config(opts: dict[str, Any]) -> RunConfig:
    """The configuration of one run from the run command's options (consumed)."""
    backend, backend_opts = backend_settings(opts)
    chains = read_chains(opts.pop("chains", None))
    schedule_file = opts.pop("schedule", None)
    schedule = None if schedule_file is None else replay.read_schedule(Path(schedule_file))
    nemesis = split_names(str(opts["nemesis"]))
    if chains is not None and nemesis == [NONE]:
        nemesis = ["aimed"]
    if schedule is not None and nemesis == [NONE]:
        nemesis = [SCHEDULE]
    return RunConfig(
        cluster=str(opts["cluster"]),
        cluster_options=kind_settings(str(opts["cluster"]), opts),
        backend=backend,
        backend_options=backend_opts,
        workloads=split_names(str(opts["workloads"])),
        nemesis=nemesis,
        chains=chains,
        schedule=schedule,
        nemesis_interval=opts["nemesis_interval"],  # type: ignore[arg-type]
        time_limit=float(opts["time_limit"]),  # type: ignore[arg-type]
        rate=float(opts["rate"]),  # type: ignore[arg-type]
        concurrency=int(opts["concurrency"]),  # type: ignore[arg-type]
        seed=int(opts["seed"]),  # type: ignore[arg-type]
        isolation=str(opts["isolation"]),
        model=opts["model"],
        op_timeout=float(opts["op_timeout"]),  # type: ignore[arg-type]
        op_pause_ms=float(opts["op_pause"]),  # type: ignore[arg-type]
        key_count=int(opts["key_count"]),  # type: ignore[arg-type]
        max_writes_per_key=int(opts["max_writes_per_key"]),  # type: ignore[arg-type]
        max_txn_length=int(opts["max_txn_length"]),  # type: ignore[arg-type]
        cancel_after=opts["cancel_after"],  # type: ignore[arg-type]
        settle=float(opts["settle"]),  # type: ignore[arg-type]
        max_recovery=opts["max_recovery"],  # type: ignore[arg-type]
        store=opts["store"],  # type: ignore[arg-type]
        name=opts["name"],  # type: ignore[arg-type]
        keep_cluster=bool(opts["keep_cluster"]),
        spark_master=opts["spark_master"],  # type: ignore[arg-type]
    )


cli.add_command(
    click.Command(
        "explore",
        params=[
            *(p for p in run.params if p.name not in NOT_EXPLORED),
            click.Option(
                ["--nemesis"],
                default="aimed",
                show_default=True,
                help="aimed: each run's faults are the chains explore chose; all: every fault "
                "of `--nemesis all`, its aimed ones the chains explore chose (or a list of "
                "packages with aimed in it).",
            ),
            click.Option(
                ["--budget"],
                type=float,
                default=60.0,
                show_default=True,
                help="Minutes to explore: no run starts that would end past them.",
            ),
        ],
        callback=explore_command,
        help=explore_command.__doc__,
        short_help="Many short runs, each aimed at what no run has reached yet.",
    )
)


@cli.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--keep",
    multiple=True,
    help="An anomaly type to keep (`lost`, or `set:lost`; repeatable; default: every type "
    "the run showed).",
)
@click.option(
    "--repeats",
    default=3,
    show_default=True,
    help="Runs of a candidate at most; it is kept when one of them shows a kept anomaly.",
)
@click.option(
    "--confirm",
    default=5,
    show_default=True,
    help="Runs of the minimal command at the end, for its reproduction rate.",
)
@click.option(
    "--budget",
    default=120.0,
    show_default=True,
    help="Minutes to search: then the smallest found so far is the answer.",
)
def shrink(run: Path, keep: tuple[str, ...], repeats: int, confirm: int, budget: float) -> None:
    """Cut a red run down to the shortest command that still shows its anomaly: its faults
    replayed (--schedule) and delta-debugged to the fewest, moved earlier, --time cut, then fewer
    workers and a lower rate, each candidate run up to --repeats times; then --confirm runs of
    the minimal command give its reproduction rate.

    Writes <store>/shrink/<test>-<run>/: schedule.json, command.txt (the one-line command),
    shrink.json and report.html (the original and the minimal side by side), kept as it goes, so
    Ctrl-C or a spent budget leaves what was found. Exit: 0 the minimal command showed the
    anomaly again, 2 it did not, 130 interrupted."""
    from harness.shrink import shrink_run

    sys.exit(shrink_run(run, keep, repeats, confirm, budget, explored_run, console.print))


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--workload",
    "workloads",
    default=None,
    help="Workload(s) of a bare history file (a run folder knows its own).",
)
@click.option(
    "--out",
    default=None,
    type=click.Path(path_type=Path),
    help="Where results.json and report.html go (default: the run folder, or "
    "<history>-check/ beside a bare file).",
)
@click.option(
    "--model",
    default=None,
    help="Consistency model append histories are checked against, as Elle names them "
    "(read-committed, snapshot-isolation, serializable, strict-serializable, strong-session-…); "
    "default: the run's, or serializable for a bare history.",
)
@click.option(
    "--mode",
    default=None,
    type=click.Choice([*(c.value for c in Contract), *LEGACY]),
    help="The contract the append and set checkers hold the history to: durable, or "
    "confirm-rollback (a write told it was rolled back must never appear); default: the run's, "
    "or durable for a bare history (safekeeper is the old name of durable).",
)
@click.option(
    "--max-recovery",
    type=float,
    default=None,
    help="Seconds free of faults a write may take to be acknowledged again after a heal "
    "(slow-recovery, write-stall); default: the run's bound, or none.",
)
@click.option(
    "--accounts",
    type=int,
    default=None,
    help="A bare bank history's accounts, 0…N-1; default: the keys of its first successful read.",
)
@click.option(
    "--total",
    type=int,
    default=None,
    help="A bare bank history's total; default: the sum of its first successful read.",
)
@spark_master_option("the analysis")
def check(
    paths: tuple[Path, ...],
    workloads: str | None,
    out: Path | None,
    model: str | None,
    mode: str | None,
    max_recovery: float | None,
    accounts: int | None,
    total: int | None,
    spark_master: str | None,
) -> None:
    """Re-check stored histories (run folders or history.jsonl files) without any cluster.

    Each path gets its own verdict and report; the exit code is the worst of them.
    """
    from harness.check import Bank, check_paths

    if max_recovery is not None and max_recovery <= 0:
        raise BadInput(f"--max-recovery must be positive, got {max_recovery:g}")
    if accounts is not None and accounts < 1:
        raise BadInput(f"--accounts must be at least 1, got {accounts}")
    names = split_names(workloads) if workloads else None
    bank = Bank(accounts, total)
    contract = Contract.parse(mode) if mode else None
    sys.exit(
        check_paths(
            list(paths), names, out, spark_master, console, model, contract, max_recovery, bank
        )
    )


@cli.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["edn", "schedule"]),
    default="edn",
    show_default=True,
    help="edn: Jepsen's history format, which Elle reads; schedule: the run's faults, each "
    "with its times and plan, which `harness run --schedule` replays (a run folder only).",
)
@click.option(
    "--out",
    default=None,
    type=click.Path(path_type=Path),
    help="Where to write it (default: history.edn, or schedule.json, in the run folder).",
)
def export(run: Path, fmt: str, out: Path | None) -> None:
    """Write a run's history in another format, so that other tools can check it too, or its
    faults as a schedule to replay."""
    from core.history import has_partial_last_line
    from harness.edn_history import write_events

    history = run / store.HISTORY if run.is_dir() else run
    if not history.is_file():
        raise BadInput(f"{run} is neither a run folder nor a history file")
    if fmt == "schedule" and not (run / store.CONFIG).is_file():
        raise BadInput(f"{run} is no run folder with a config.json: a schedule needs the run's "
                       "cluster, so export it from the run's folder")  # fmt: skip
    lines = history.read_text(encoding="utf-8").splitlines()
    if lines and has_partial_last_line(history):
        lines = lines[:-1]  # cut off by a crash
    try:
        events = [json.loads(line) for line in lines if line.strip()]
    except ValueError as e:
        raise BadInput(f"{history} is not a history of JSON lines: {e}") from e
    if fmt == "schedule":
        target = out or run / SCHEDULE_FILE
        schedule = run_schedule(run, events)
        target.write_text(json.dumps(schedule, indent=1) + "\n")
        console.print(f"{len(schedule['faults'])} faults written to {target}")
        return
    target = out or history.with_suffix(f".{fmt}")
    count = write_events(events, target)
    console.print(f"{count} events written to {target}")


SCHEDULE_FILE = "schedule.json"


def run_schedule(run: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The schedule of a run folder's faults, its nodes those its cluster had."""
    from clusters.registry import cluster_kind

    try:
        config = json.loads((run / store.CONFIG).read_text())
        kind = cluster_kind(config["cluster"])
        options = kind.checked_options(config.get("cluster_options") or {})
    except (ValueError, KeyError, TypeError) as e:
        raise BadInput(f"{run / store.CONFIG} does not say the run's cluster: {e!r}") from e
    nodes = [f"n{i}" for i in range(1, kind.nodes_needed(options) + 1)]
    return replay.schedule_of(events, kind.name, nodes, str(run))


@cli.command()
@click.argument("result_dirs", nargs=-1, type=click.Path(path_type=Path))
@junit_option
@spark_master_option("the index of runs")
@click.option(
    "--require-moment",
    "require_moment",
    multiple=True,
    metavar="NAME[=COUNT]",
    help="A moment of the protocol every run must have reached (at least COUNT times, default "
    "1), as its report's Moments table counts them, e.g. term-won or catch-up=3; a valid run "
    "that did not counts as undecided. Repeatable.",
)
def gate(
    result_dirs: tuple[Path, ...],
    junit: Path | None,
    spark_master: str | None,
    require_moment: tuple[str, ...],
) -> None:
    """Gate a release on stored runs: every run at or below RESULT_DIRS (default: results).

    Prints each run's verdict and anomalies and exits with the worst verdict: 0 all valid,
    1 anomalies found, 2 a run undecided or not checked (or, with --require-moment, valid
    without having reached a required moment).
    """
    from harness.gate import gate_paths, parse_required

    paths = list(result_dirs) or [Path("results")]
    required = parse_required(require_moment)
    sys.exit(gate_paths(paths, junit, spark_master, console, required))


@cli.command()
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on, 0 to 65535 (0: any free).",
)
@spark_master_option("the index of runs")
def serve(store: Path, host: str, port: int, spark_master: str | None) -> None:
    """Browse the store: an index of every run (sortable, filterable), each report and file,
    and a zip of a run. Listens on loopback unless --host says otherwise; Ctrl-C stops."""
    from harness.serve import serve as serve_store

    serve_store(store, host, port, spark_master, console)


@cli.group()
def cluster() -> None:
    """Manage clusters by hand: up, status, down."""


@cluster.command("up")
@click.option("--cluster", "kind", default="safekeeper", show_default=True, help="Cluster kind.")
@kind_options
@backend_options
@click.option("--name", default="manual", show_default=True, help="Cluster name.")
def cluster_up(kind: str, name: str, **opts: Any) -> None:
    """Deploy a cluster and leave it running; prints its endpoints."""
    from clusters.registry import cluster_kind, make_backend

    backend, settings = backend_settings(opts)
    k = cluster_kind(kind)(make_backend(backend, **settings), name, kind_settings(kind, opts))
    k.deploy(lambda msg: console.print(f"[dim]{msg}[/]"))
    for ep in k.endpoints():
        console.print(f"{ep.node}: {ep.url}")


@cluster.command("status")
@click.option(
    "--cluster", "kind", default=None, help="Cluster kind (default: the kind the cluster was "
    "brought up as, which its first node records)."
)  # fmt: skip
@kind_options
@backend_options
@click.option("--name", default="manual", show_default=True, help="Cluster name.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the whole status as JSON (the table shortens "
    "long lists such as a term history to their last entries)."
)  # fmt: skip
def cluster_status(kind: str | None, name: str, as_json: bool, **opts: Any) -> None:
    """Show who leads and each node's state. The cluster's kind and options are those it was
    brought up with (by `harness run --keep-cluster` or `harness cluster up`); options given
    here override them."""
    from clusters.kinds.base import ClusterKind
    from clusters.registry import cluster_kind, make_backend

    backend, settings = backend_settings(opts)
    b = make_backend(backend, **settings)
    if name not in b.clusters():
        raise BadInput(f"no cluster named {name!r} is up; `harness cluster up --name {name}`")
    declared = ClusterKind.declared(b.nodes(name))
    said_kind, said_options = declared or (None, {})
    kind = kind or said_kind or "safekeeper"
    options = said_options if kind == said_kind else {}
    status = cluster_kind(kind)(b, name, options | kind_settings(kind, opts)).status()
    if as_json:
        click.echo(json.dumps(status, indent=2, default=str))
        return
    title = f"{name} ({status['kind']}), leader: {status.get('leader')}"
    if status.get("generation") is not None:  # a kind whose roles come in generations
        title += f", generation {status['generation']}"
    table = Table(title=title)
    keys = list(dict.fromkeys(k for n in status["nodes"].values() for k in n))
    table.add_column("node")
    for k in keys:
        table.add_column(k, overflow="fold")
    for node, info in status["nodes"].items():
        table.add_row(node, *(status_cell(info.get(k, "")) for k in keys))
    console.print(table)


STATUS_TAIL = 3  # entries of a long list (a term history) the status table shows


def status_cell(value: Any) -> str:
    """A value of a node's status as a table cell: a long list as its count and its last few
    entries, so that a long term history keeps a row to a line or two."""
    if isinstance(value, list) and len(value) > STATUS_TAIL + 1:
        tail = ", ".join(map(str, value[-STATUS_TAIL:]))
        return f"{len(value)}: … {tail}"
    return str(value)


@cluster.command("image")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every kind's image (Manatee's, Patroni's, pg_auto_failover's, repmgr's too), "
    "not only the node image most kinds use.",
)
def cluster_image(every: bool) -> None:
    """Build the node image now (offline, from Debian packages); runs build it on first use."""
    from clusters.image import ALL_IMAGES, NODE_IMAGE, ensure_image

    for spec in ALL_IMAGES if every else (NODE_IMAGE,):
        console.print(f"{spec.name}: {ensure_image(spec, console)}")


@cluster.command("down")
@click.argument("names", nargs=-1)
@backend_options
def cluster_down(names: tuple[str, ...], **opts: Any) -> None:
    """Remove clusters by name; with no name, every cluster the harness left behind.

    Faults still in place on their nodes are healed first."""
    from clusters.registry import make_backend
    from nemesis import heal_nodes

    backend, settings = backend_settings(opts)
    b = make_backend(backend, **settings)
    targets = list(names) or b.clusters()
    for name in targets:
        heal_nodes(b.nodes(name))  # a backend whose nodes outlive `down` must not keep faults
        removed = b.down(name)
        console.print(f"{name}: removed {len(removed)} nodes and networks")
    if not targets:
        console.print("nothing to remove")


def main() -> None:
    """Entry point: map every failure to one sentence and DESIGN.md's exit codes."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx else ""
        err.print(f"error: {e.format_message()}{hint}")
        sys.exit(EXIT_BAD_INPUT)
    except click.Abort:
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except BadInput as e:
        err.print(f"error: {e}")
        sys.exit(EXIT_BAD_INPUT)
    except InfraError as e:
        err.print(f"harness error: {e}")
        sys.exit(EXIT_INFRA)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:
        if os.environ.get("HARNESS_DEBUG"):
            traceback.print_exc()
        err.print(f"harness error: {type(e).__name__}: {e} (HARNESS_DEBUG=1 shows the traceback)")
        sys.exit(EXIT_INFRA)
