"""The power layer under a node's state: powerfs (`clusters/powerfs`, a FUSE filesystem run on
this machine) holds each node's /var/lib/harness, bind-mounted into the node, and keeps what the
node's processes wrote but did not fsync in its own memory, so that the power fault can drop it
at one instant (as Jepsen's lazyfs does).

One powerfs per node. Its backing directory, mount point, control socket and log are under
POWER_DIR/<cluster>/<node>/; `unmount_cluster` finds them there whatever happened to the
harness, so `harness cluster down` removes them after a crash too.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from clusters import crates
from core.errors import InfraError

POWER_DIR = Path("/var/lib/harness-power")
NODE_DIR = "/var/lib/harness"  # where every cluster kind keeps a node's state
MOUNT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Layer:
    """A node's power layer, all under one folder."""

    root: Path
    data: Path  # the backing directory: what the node's disk holds
    mount_point: Path
    control: Path  # the socket that takes "lose" and "sync"
    log: Path


def layer(cluster: str, node: str) -> Layer:
    root = POWER_DIR / cluster / node
    return Layer(root, root / "data", root / "mnt", root / "control.sock", root / "powerfs.log")


def ensure_binary() -> Path:
    """powerfs, built from its crate when missing (`make setup` builds it; cargo is needed)."""
    return crates.ensure_built("powerfs")


def mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == target for line in f if len(line.split()) > 1)


def mount(cluster: str, node: str) -> Layer:
    """Start the node's powerfs over a fresh backing directory and wait until it is mounted."""
    binary = ensure_binary()
    where = layer(cluster, node)
    for path in (where.data, where.mount_point):
        path.mkdir(parents=True, exist_ok=True)
    with where.log.open("ab") as log:
        subprocess.Popen(
            [str(binary), str(where.data), str(where.mount_point), str(where.control)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # not in the harness's process group: Ctrl-C is not for it
        )
    deadline = time.monotonic() + MOUNT_TIMEOUT
    while not (mounted(where.mount_point) and where.control.exists()):
        if time.monotonic() > deadline:
            raise InfraError(
                f"powerfs did not mount {where.mount_point}: {where.log.read_text()[-500:]}"
            )
        time.sleep(0.05)
    return where


def command(control: Path, what: str, timeout: float = 30.0) -> str:
    """Send one command to a powerfs (`lose`, `stats`) and return its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(control))
        sock.sendall(what.encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    text = answer.decode(errors="replace").strip()
    if not text or text.startswith("error"):
        raise InfraError(f"powerfs at {control} answered {text!r} to {what!r}")
    return text


def unmount_cluster(cluster: str) -> list[str]:
    """Unmount every powerfs of the cluster (its process then exits) and remove its directories;
    returns the mount points unmounted. Call it once the nodes that used them are gone."""
    base = POWER_DIR / cluster
    done = []
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f if len(line.split()) > 1]
    for point in points:
        if Path(point).is_relative_to(base):
            result = subprocess.run(["fusermount3", "-u", point], capture_output=True)
            if result.returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
            done.append(point)
    shutil.rmtree(base, ignore_errors=True)
    return done
