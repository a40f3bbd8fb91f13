"""Many runs in one command, for release gating: `harness run --test-count N` and `--matrix FILE`.

A matrix file is TOML (the standard library reads it):

    [run]                     # options for every run, as `harness run` spells them without `--`
    cluster = "safekeeper"
    time = 30

    [matrix]                  # every combination is one run: workloads × nemeses × modes × seeds
    workloads = ["bank,append", "set"]
    nemeses = ["none", "partition-majority"]
    modes = ["safekeeper", "confirm-rollback"]
    seeds = [0, 1]

    [[include]]               # runs after the matrix's, each with its own options
    workload = "set"
    nemesis = "kill-primary"
    bug = "ack-before-quorum"

The command line's options are the defaults, `[run]` overrides them, and a run's own values
(its combination, or an `[[include]]`) override both. `[matrix]` also takes any other option by
its name with a list of values (`variant = ["term-history", "epoch"]`), and a list given where
an option takes text is joined with commas (`workload = ["bank", "append"]` is the two workloads
sharing the workers, `bug = ["a", "b"]` two planted bugs). `--test-count N` repeats each run
N times with seeds seed … seed+N-1.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from core.errors import BadInput, InfraError
from core.verdict import EXIT_INFRA, EXIT_INTERRUPTED
from harness.config import RunConfig

# The matrix's dimensions as the issue names them, and the option each one sets.
DIMENSIONS = {"workloads": "workload", "nemeses": "nemesis", "modes": "mode", "seeds": "seed"}
SECTIONS = ("run", "matrix", "include")
# Options that choose how many runs there are, not what one run does.
NOT_PER_RUN = ("matrix", "test-count", "junit")


def option_flags(command: click.Command) -> dict[str, click.Option]:
    """The command's options by their long flag without the dashes (`time`, `synchro-timeout`)."""
    flags = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for opt in param.opts:
                if opt.startswith("--") and opt[2:] not in NOT_PER_RUN:
                    flags[opt[2:]] = param
    return flags


def expand(
    path: Path, base: dict[str, Any], command: click.Command, ctx: click.Context
) -> list[dict[str, Any]]:
    """The runs a matrix file describes, each as the run command's options (`base` updated)."""
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise BadInput(f"cannot read the matrix file {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML: {e}") from e
    unknown = sorted(set(doc) - set(SECTIONS))
    if unknown:
        raise BadInput(
            f"{path}: unknown section {', '.join(unknown)}: a matrix file has "
            f"[run], [matrix] and [[include]]"
        )
    flags = option_flags(command)
    common = base | _options(path, "[run]", _table(path, doc, "run"), flags, ctx)

    axes: list[tuple[click.Option, list[Any]]] = []
    for name, values in _table(path, doc, "matrix").items():
        if not isinstance(values, list) or not values:
            raise BadInput(f"{path}: [matrix] {name} must be a non-empty list of values")
        axes.append((_flag(path, "[matrix]", name, flags), values))
    runs = []
    if axes or "include" not in doc:
        for combination in itertools.product(*(values for _, values in axes)):
            chosen = {
                param.name: value for (param, _), value in zip(axes, combination, strict=True)
            }
            runs.append(common | _convert(path, "[matrix]", chosen, flags, ctx))
    includes = doc.get("include", [])
    if not isinstance(includes, list):
        raise BadInput(f"{path}: include must be an array of tables, [[include]]")
    for number, extra in enumerate(includes, 1):
        if not isinstance(extra, dict):
            raise BadInput(f"{path}: include must be an array of tables, [[include]]")
        runs.append(common | _options(path, f"[[include]] number {number}", extra, flags, ctx))
    return runs


def repeat(runs: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """Each run `count` times, with seeds seed, seed+1, …, seed+count-1."""
    if count < 1:
        raise BadInput(f"--test-count must be at least 1, got {count}")
    return [run | {"seed": int(run["seed"]) + i} for run in runs for i in range(count)]


def _table(path: Path, doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    table = doc.get(name, {})
    if not isinstance(table, dict):
        raise BadInput(f"{path}: {name} must be a table, [{name}]")
    return table


def _flag(path: Path, where: str, flag: str, flags: dict[str, click.Option]) -> click.Option:
    flag = DIMENSIONS.get(flag, flag)
    if flag not in flags:
        raise BadInput(
            f"{path}: {where} names {flag!r}, which is no option of `harness run` "
            f"(the options: {', '.join(sorted(flags))})"
        )
    return flags[flag]


def _options(
    path: Path,
    where: str,
    table: dict[str, Any],
    flags: dict[str, click.Option],
    ctx: click.Context,
) -> dict[str, Any]:
    """A table of options, by flag, as the run command's parameters, converted by their types."""
    named = {_flag(path, where, flag, flags).name: value for flag, value in table.items()}
    return _convert(path, where, named, flags, ctx)


def _convert(
    path: Path,
    where: str,
    values: dict[str | None, Any],
    flags: dict[str, click.Option],
    ctx: click.Context,
) -> dict[str, Any]:
    by_name = {param.name: param for param in flags.values()}
    out = {}
    for name, value in values.items():
        param = by_name[name]
        if isinstance(value, list) and isinstance(param.type, click.types.StringParamType):
            value = ",".join(str(v) for v in value)
        try:
            out[str(name)] = param.type_cast_value(ctx, value)
        except click.BadParameter as e:
            raise BadInput(f"{path}: {where} {param.opts[-1][2:]} = {value!r}: {e.message}") from e
    return out


def run_many(configs: list[RunConfig], junit: Path | None, console: Console) -> int:
    """Run each configuration in turn, check it, then gate them all: the worst verdict.

    Every configuration is validated before the first run starts. A run that fails (its
    cluster does not come up, …) is an error in the gate (exit 255) and the next one runs."""
    from harness.check import check_paths, worst
    from harness.gate import gate_runs
    from harness.runner import Runner

    runners = [Runner(cfg, console) for cfg in configs]
    done: list[Path] = []
    errors: dict[Path, str] = {}
    lost = []  # runs that failed before they had a folder
    for number, runner in enumerate(runners, 1):
        cfg = runner.cfg
        console.rule(f"run {number} of {len(runners)}: {describe(cfg)}")
        try:
            result = runner.run()
            if result.interrupted:
                console.print(f"interrupted; finished runs: {', '.join(map(str, done)) or 'none'}")
                return EXIT_INTERRUPTED
            check_paths([result.run_dir], None, None, cfg.spark_master, console)
        except Exception as e:
            message = (
                f"{type(e).__name__}: {e}" if not isinstance(e, BadInput | InfraError) else str(e)
            )
            console.print(f"[red]run {number} failed:[/] {message}")
            if runner.run_dir is None:
                lost.append(EXIT_INFRA)
                continue
            errors[runner.run_dir] = message
        if runner.run_dir is not None:
            done.append(runner.run_dir)
    console.rule("gate")
    code = gate_runs(done, errors, junit, configs[0].spark_master, console) if done else EXIT_INFRA
    return worst([code, *lost])


def describe(cfg: RunConfig) -> str:
    options = " ".join(f"{k}={v}" for k, v in sorted(cfg.cluster_options.items()))
    return (
        f"{cfg.cluster}{' ' + options if options else ''}, workload {','.join(cfg.workloads)}, "
        f"nemesis {','.join(cfg.nemesis)}, seed {cfg.seed}"
    )
