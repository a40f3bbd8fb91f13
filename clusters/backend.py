"""The node abstraction every backend provides and every fault and cluster kind is built on.

A node is a machine to the harness: it can run a command, receive and give back files, show its
logs, signal processes, and expose a port to the control machine. Cluster kinds install and start
their software through this interface only, so the same code works on every backend.
"""

from __future__ import annotations

import posixpath
import re
import tarfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from clusters import power
from core.errors import BadInput

if TYPE_CHECKING:  # the image module opens the engine's library: only the type is needed here
    from clusters.image import ImageSpec

# Docker's rule for container names, which embed the cluster name; every backend keeps to it.
CLUSTER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
# Where every kind writes a node's logs, which a run keeps at its end.
LOG_DIR = "/var/log/harness"
READ_TRIES = 3  # how often `Node.read` asks a command that must print and printed nothing
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class ExecResult:
    code: int
    output: str  # stdout and stderr interleaved


class NodeCommandError(Exception):
    """A command on a node exited non-zero where success was required."""

    def __init__(self, node: str, cmd: str, result: ExecResult) -> None:
        super().__init__(f"on {node}: `{cmd}` exited {result.code}: {result.output.strip()[-500:]}")
        self.result = result


class Node(ABC):
    """One machine of a cluster, named n1…nN; `name` is also its hostname on the cluster network."""

    name: str

    def exec(
        self,
        cmd: str,
        *,
        user: str = "root",
        check: bool = True,
        env: dict[str, str] | None = None,
        detach: bool = False,
    ) -> ExecResult:
        """Run a shell command (`sh -c`) on the node. `detach` starts it in the background.

        NodeCommandError if `check` and it failed. A detached command that started has neither
        a code nor output to report. `signal` relies on this: no process on the node but that
        `sh -c` (and what it starts) has `cmd` in its command line, detached or not."""
        result = self._shell(cmd, user, env or {}, detach)
        if check and result.code != 0:
            raise NodeCommandError(self.name, cmd, result)
        return ExecResult(0, "") if detach and result.code == 0 else result

    def read(self, cmd: str) -> str:
        """The output of a command that always prints something (a process table, a shell's own
        pid): Docker's exec has been seen to hand back no output at all for such a command on
        a loaded machine (docker/docker-py#2042), which a caller would take for an empty
        table, so an empty answer is asked again, READ_TRIES times in all. The command must
        be safe to run twice."""
        out = ""
        for _ in range(READ_TRIES):
            out = self.exec(cmd).output
            if out.strip():
                break
        return out

    @abstractmethod
    def _shell(self, cmd: str, user: str, env: dict[str, str], detach: bool) -> ExecResult:
        """`exec`'s part the backend does: run `sh -c cmd` as `user` (detached, a zero code says
        it started). A wrapper the backend needs (a login shell, nohup, a switch of user) must
        exec the next step rather than fork it and stay behind, or `pgrep -f` finds the wrapper
        too and `signal` signals it. Processes outside the node's PID namespace (nsenter on the
        host, say) are not seen and do not count."""

    def put_file(self, path: str, data: bytes, *, mode: int = 0o644, owner: str = "root") -> None:
        """Write a file on the node, creating its parent directories."""
        if not posixpath.isabs(path):
            raise ValueError(f"put_file needs an absolute path on the node, not {path!r}")
        self._put_file(path, data, mode, owner)

    def put_files(
        self, directory: str, files: Mapping[str, bytes], *, mode: int = 0o644, owner: str = "root"
    ) -> None:
        """Write several files into one directory on the node: a backend whose every transfer
        costs round trips (Docker's) sends them at once, since a kind installs a dozen files on
        every node of every run."""
        for name, data in files.items():
            self.put_file(posixpath.join(directory, name), data, mode=mode, owner=owner)

    @abstractmethod
    def _put_file(self, path: str, data: bytes, mode: int, owner: str) -> None:
        """`put_file`'s part the backend does, the path known to be absolute."""

    @abstractmethod
    def get(self, path: str, dest: Path) -> bool:
        """Copy a file or directory from the node into the local directory `dest`.

        Returns False when the path does not exist on the node."""

    @abstractmethod
    def logs(self) -> str:
        """What the node's init and main process printed (the container log, say)."""

    @abstractmethod
    def endpoint(self, port: int) -> tuple[str, int]:
        """The (host, port) at which the control machine reaches `port` of this node."""

    def lose_power(self) -> str:
        """Drop at once every write to the node's state (/var/lib/harness) that its processes did
        not fsync, as a power loss would (the power layer, clusters/power.py); says what was
        lost. Kill the node's processes first: what they write meanwhile is not covered."""
        return self._power("lose")

    def sync_power(self) -> str:
        """Make everything written to the node's state durable, as a machine that settled after
        its setup would have (before that, a power loss could undo the setup itself)."""
        return self._power("sync")

    def power_control(self) -> Path | None:
        """The control socket of the power layer under the node's state, if it has one."""
        return None

    def _power(self, command: str) -> str:
        control = self.power_control()
        if control is None:
            raise NotImplementedError(f"{self.name} has no power layer")
        return power.command(control, command)

    def signal(self, pattern: str, sig: str) -> list[int]:
        """Send signal `sig` (e.g. "KILL", "STOP") to the processes whose command line matches."""
        # The `sh -c` that runs pgrep has the pattern in its own command line, so pgrep -f
        # matches it too: it prints its pid ($$) first, and that pid is left out.
        cmd = f"echo $$; pgrep -f -- {shell_quote(pattern)} || true"
        found = self.read(cmd).split()
        if not found:
            raise NodeCommandError(self.name, cmd, ExecResult(0, "(no output, every time)"))
        shell, *rest = found
        pids = [int(p) for p in rest if p.isdigit() and p != shell]
        if pids:
            self.exec(f"kill -{sig} {' '.join(map(str, pids))}", check=False)
        return pids


class Backend(ABC):
    """Brings nodes up on a private network and tears them down; named by `--backend`."""

    name: str
    offers_power = False  # whether `power=True` puts the power layer under its nodes' state
    power = False  # whether `up` does (the runner asks for it when a run may lose power)
    # whether a kind's nodes also publish the ports a connection-fault proxy stands on (the
    # runner asks for it when a fault acts on such proxies: nemesis.toxic)
    proxied = False
    max_nodes = 1000  # the most nodes one cluster may have on this backend

    def up(
        self, cluster: str, count: int, ports: list[int], image: ImageSpec | None = None
    ) -> list[Node]:
        """Create nodes n1…n`count` of `cluster` on their own network, exposing `ports`.

        `image` names the software the nodes need when a kind needs more than the node image
        (the backend's own image otherwise): built on first use where the backend builds."""
        if not CLUSTER_NAME.fullmatch(cluster):
            raise BadInput(f"cluster name {cluster!r} must be letters, digits, '_', '.', '-'")
        if not 1 <= count <= self.max_nodes:
            raise BadInput(f"a {self.name} cluster has 1 to {self.max_nodes} nodes, not {count}")
        if bad := [p for p in ports if not 0 < p < 65536]:
            raise BadInput(f"not TCP ports: {bad}")
        return self._up(cluster, count, ports, image)

    @abstractmethod
    def _up(
        self, cluster: str, count: int, ports: list[int], image: ImageSpec | None
    ) -> list[Node]:
        """`up` once its arguments are checked: the backend's own part."""

    @abstractmethod
    def nodes(self, cluster: str) -> list[Node]:
        """The nodes of a cluster that is up, in name order (empty if none)."""

    @abstractmethod
    def clusters(self) -> list[str]:
        """Names of the clusters this backend has up, including ones a crashed run left."""

    @abstractmethod
    def down(self, cluster: str) -> list[str]:
        """Remove every node and network of `cluster`; returns what was removed."""


def each(act: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`act` on every item at once, one thread each (the nodes of a cluster: their engine calls
    and commands are waits, not work); the results in the items' order, the first exception
    raised once every call has ended."""
    if len(items) <= 1:
        return [act(item) for item in items]
    with ThreadPoolExecutor(len(items)) as pool:
        futures = [pool.submit(act, item) for item in items]
    return [f.result() for f in futures]


def in_order(nodes: Iterable[Node]) -> list[Node]:
    """Nodes in name order: n2 before n10."""
    return sorted(nodes, key=lambda n: int(n.name.removeprefix("n")))


def local_owner(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """The "tar" extraction filter for what `get` copies from a node, and the files become the
    harness user's: the node's uids mean nothing on the control machine and would make the run
    folder hard to delete."""
    return tarfile.tar_filter(member, dest).replace(
        uid=None, gid=None, uname=None, gname=None, deep=False
    )


def shell_quote(s: str) -> str:
    """Quote one word for `sh -c`."""
    return "'" + s.replace("'", "'\"'\"'") + "'"
