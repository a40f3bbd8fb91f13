"""Run the `harness` command as a user would, in a scratch store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HARNESS = str(Path(sys.executable).parent / "harness")


def harness(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HARNESS, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "results"


def why_invalid(result: subprocess.CompletedProcess[str], results: dict[str, Any]) -> str:
    """What a failed run's test should print: the harness's last lines (its verdict names each
    invalid checker's anomaly types) and the first anomalies of the checkers that judged it
    invalid, not of the valid ones, whose allowed findings would crowd them out."""
    shown = {
        name: [
            {"type": a.get("type"), "explanation": a.get("explanation")}
            for a in checker.get("anomalies", [])[:3]
        ]
        for name, checker in results["checkers"].items()
        if checker.get("valid") is not True
    }
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-8:])
    return f"{tail}\n{json.dumps(shown, indent=1)}"


def valid_run(
    store: Path, *args: str, timeout: float = 900
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`harness run ARGS` into `store`, which must end valid (exit 0): its results and its
    history."""
    result = harness("run", *args, "--store", str(store), timeout=timeout)
    run = (store / "latest").resolve()
    assert (run / "results.json").exists(), result.stdout + result.stderr
    results = json.loads((run / "results.json").read_text())
    assert result.returncode == 0, why_invalid(result, results)
    assert results["valid"] is True
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    return results, history
