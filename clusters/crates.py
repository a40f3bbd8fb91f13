"""The harness's own Rust programs (`clusters/<crate>`), built by cargo when missing: `make setup`
builds them (`python -m clusters.crates`), and a run or a test on a machine where it did not
builds them on first use.

cargo compiles into a target directory shared by every checkout on the machine (under the
user's cache, or HARNESS_CARGO_TARGET), so a clean clone compiles only the crate itself and not
its dependencies again (the proxy's tokio and axum: about a minute of a two-core machine); the
binary is then copied to where the checkout looks for it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from core.errors import InfraError

HERE = Path(__file__).parent
TARGET_ENV = "HARNESS_CARGO_TARGET"
CRATES = {"powerfs": "powerfs", "toxiproxy": "harness-toxiproxy"}  # crate → its binary


def binary(crate: str, name: str | None = None) -> Path:
    """Where the crate's release binary is (named as the crate unless `name` says)."""
    return HERE / crate / "target" / "release" / (name or crate)


def target_dir(crate: str) -> Path:
    """The shared target directory the crate is compiled in."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get(TARGET_ENV) or Path(cache, "harness", "cargo")) / crate


def build(crate: str, name: str | None = None) -> Path:
    """Build the crate (cargo does nothing when nothing changed) and put its binary in place."""
    target = target_dir(crate)
    made = subprocess.run(
        ["cargo", "build", "--release", "--quiet"],
        cwd=HERE / crate,
        env={**os.environ, "CARGO_TARGET_DIR": str(target)},
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        raise InfraError(f"building {crate} failed: {made.stderr.strip()[-500:]}")
    built, path = target / "release" / (name or crate), binary(crate, name)
    if not path.exists() or path.stat().st_mtime_ns != built.stat().st_mtime_ns:
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.new")
        shutil.copy2(built, draft)  # a running copy of the old binary keeps its own file
        draft.rename(path)
    return path


def ensure_built(crate: str, name: str | None = None) -> Path:
    """The crate's release binary, built first if it is missing (cargo is needed)."""
    path = binary(crate, name)
    return path if path.exists() else build(crate, name)


if __name__ == "__main__":
    for crate in sys.argv[1:] or CRATES:
        if crate not in CRATES:
            sys.exit(f"no crate {crate!r} here: the crates are {', '.join(CRATES)}")
        build(crate, CRATES[crate])
