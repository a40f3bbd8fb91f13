"""Run the `harness` command as a user would, in a scratch store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
