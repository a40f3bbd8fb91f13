"""The harness's own Rust programs (`clusters/<crate>`), built by cargo when missing: `make setup`
builds them, and a run or a test on a machine where it did not builds them on first use."""

from __future__ import annotations

import subprocess
from pathlib import Path

from core.errors import InfraError

HERE = Path(__file__).parent


def binary(crate: str, name: str | None = None) -> Path:
    """Where the crate's release binary is (named as the crate unless `name` says)."""
    return HERE / crate / "target" / "release" / (name or crate)


def ensure_built(crate: str, name: str | None = None) -> Path:
    """The crate's release binary, built first if it is missing (cargo is needed)."""
    path = binary(crate, name)
    if not path.exists():
        build = subprocess.run(
            ["cargo", "build", "--release", "--quiet"],
            cwd=HERE / crate,
            capture_output=True,
            text=True,
        )
        if build.returncode != 0:
            raise InfraError(f"building {crate} failed: {build.stderr.strip()[-500:]}")
    return path
