"""What a cluster kind is: the software installed on a backend's nodes, and how to reach it."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from clusters.backend import Backend, Node, shell_quote
from harness.errors import BadInput, InfraError

# The clock nemesis moves a node's clock by rewriting CLOCK_FILE, which libfaketime, preloaded
# into every cluster process, reads on each clock call (FAKETIME_NO_CACHE: otherwise it caches
# for ~10 s). libfaketime fakes CLOCK_MONOTONIC too; FAKETIME_DONT_FAKE_MONOTONIC would be closer
# to a real clock step, but in 0.9.10 it breaks absolute monotonic sleeps (EINVAL).
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CLOCK_FILE = "/var/lib/harness/clock-offset"


@dataclass(frozen=True)
class KindOption:
    """A command-line option that only one cluster kind takes (e.g. --safekeepers)."""

    name: str  # the keyword in the kind's options, e.g. "safekeepers"
    type: type
    help: str
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Endpoint:
    """Where a client bound to `node` connects. A cluster that fails over lists several hosts
    (libpq tries them in turn and keeps the first that matches `target_session_attrs`, as an
    application would); `nodes` names the node behind each host, so that each operation records
    the node that served it. With `two_phase`, a writing transaction ends with PREPARE
    TRANSACTION and the cluster's leader decides its outcome (the confirm/rollback mode)."""

    node: str
    host: str  # one host, or several separated by commas
    port: int | str  # one port, or one per host separated by commas
    dbname: str
    user: str
    target_session_attrs: str = "any"
    nodes: tuple[tuple[str, str], ...] = ()  # ("host:port", node name) pairs
    two_phase: bool = False
    protocol: str = "postgres"  # which client speaks to it (workloads.clients)

    @property
    def url(self) -> str:
        ports = str(self.port).split(",")
        hosts = ",".join(
            f"{h}:{ports[min(i, len(ports) - 1)]}" for i, h in enumerate(self.host.split(","))
        )
        if self.protocol != "postgres":
            return f"{self.protocol}://{hosts}"
        query = "" if self.target_session_attrs == "any" else "?target_session_attrs="
        query += "" if self.target_session_attrs == "any" else self.target_session_attrs
        return f"postgresql://{self.user}@{hosts}/{self.dbname}{query}"


def failover_endpoint(
    nodes: list[Node],
    port: int,
    dbname: str,
    user: str,
    *,
    two_phase: bool = False,
    protocol: str = "postgres",
) -> Endpoint:
    """One endpoint listing `nodes`, for a cluster that fails over: a client keeps to the one
    that takes writes (`target_session_attrs=read-write`), as an application would, and each
    operation records the node behind the host it went to."""
    addresses = [(n.name, *n.endpoint(port)) for n in nodes]
    return Endpoint(
        ",".join(name for name, _, _ in addresses),
        ",".join(host for _, host, _ in addresses),
        ",".join(str(p) for _, _, p in addresses),
        dbname,
        user,
        "read-write",
        tuple((f"{host}:{p}", name) for name, host, p in addresses),
        two_phase,
        protocol,
    )


SYNCHRO_TIMEOUT = 2.0  # confirm-rollback: seconds a transaction waits for the quorum
SYNCHRO_TIMEOUT_OPTION = KindOption(
    "synchro_timeout",
    float,
    f"confirm-rollback: seconds a transaction waits for the quorum before the leader rolls it "
    f"back (default {SYNCHRO_TIMEOUT:g}).",
)


def synchro_timeout(options: dict[str, Any]) -> float:
    """The --synchro-timeout a kind was given, checked."""
    timeout = options.get("synchro_timeout") or SYNCHRO_TIMEOUT
    if timeout <= 0:
        raise BadInput(f"--synchro-timeout must be positive, not {timeout!r}")
    return float(timeout)


class ClusterKind(ABC):
    """Installs, starts, inspects and tears down one kind of cluster on a backend's nodes."""

    name: ClassVar[str]
    cli_options: ClassVar[tuple[KindOption, ...]] = ()
    # The contract the checkers hold its histories to (DESIGN.md): "safekeeper" (a commit that
    # returned is durable) or "confirm-rollback" (also: a rolled-back write never appears).
    mode: str = "safekeeper"
    # Whether one primary serves every read and write, so that a read that begins after a
    # COMMIT returned sees it (one Postgres, or a failover cluster that keeps one primary): its
    # append histories are then held to the real-time variant of what the isolation promises.
    realtime_order: bool = False
    # Whether some of its nodes serve a coordination service (ZooKeeper) rather than clients:
    # the faults aimed at that service (`--nemesis partition-zookeeper`, …) need them.
    coordinated: ClassVar[bool] = False

    def __init__(self, backend: Backend, cluster: str, options: dict[str, Any]) -> None:
        self.backend = backend
        self.cluster = cluster
        self.options = options

    @property
    def nodes(self) -> list[Node]:
        return self.backend.nodes(self.cluster)

    @classmethod
    @abstractmethod
    def nodes_needed(cls, options: dict[str, Any]) -> int:
        """How many nodes this kind needs with these options (known before anything starts)."""

    def node_count(self) -> int:
        return self.nodes_needed(self.options)

    @abstractmethod
    def deploy(self, say: Callable[[str], None]) -> None:
        """Bring the nodes up, install and start the software, wait until it answers."""

    @abstractmethod
    def endpoints(self) -> list[Endpoint]:
        """The endpoints clients connect to (one per node that serves clients)."""

    @abstractmethod
    def processes(self) -> dict[str, str]:
        """Process name → command-line pattern, for faults that kill or pause them."""

    def start_process(self, node: Node, name: str) -> None:
        """Start process `name` (a key of `processes()`) on `node` again, after a kill.

        Not abstract so that a kind can exist before it supports the kill nemesis."""
        raise NotImplementedError(f"cluster kind {self.name} cannot restart {name}")

    @abstractmethod
    def leader(self) -> str | None:
        """The node that currently leads (takes writes), if the kind can tell."""

    def coordinators(self) -> list[str]:
        """The nodes that serve the coordination service (none unless `coordinated`)."""
        return []

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """What an operator would look at: per node, is it up, its role and positions."""

    def poll(self) -> dict[str, dict[str, Any]]:
        """What each node says of itself now, cheaply enough to ask about once a second during
        a run (who serves, in which term; terms and LSNs): the harness records it beside the
        history and the cluster-state checker holds it to the kind's promises. A node that
        does not answer is left out; {} for a kind with nothing to say."""
        return {}

    @abstractmethod
    def collect(self, dest: Path) -> None:
        """Copy every node's logs and state files into `dest/<node>/`."""

    def teardown(self) -> list[str]:
        return self.backend.down(self.cluster)


def under_faketime(cmd: str, *, monotonic: bool = True) -> str:
    """`cmd` with libfaketime preloaded and reading the node's clock file.

    Put it after the privilege drop (`runuser -u USER -- ` + this): preloaded into runuser, it
    would create its semaphore as root, and the dropped process then fails to open it. With
    `monotonic` false only the wall clock moves, as a real clock step would."""
    env = {
        "LD_PRELOAD": FAKETIME_LIB,
        "FAKETIME_TIMESTAMP_FILE": CLOCK_FILE,
        "FAKETIME_NO_CACHE": "1",
    }
    if not monotonic:
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    return "env " + " ".join(f"{k}={shell_quote(v)}" for k, v in env.items()) + " " + cmd


def ensure_clock_file(node: Node) -> None:
    """Create the node's clock file at offset zero ("+0", libfaketime's relative format) unless it
    exists: a restart during a clock fault must not undo the fault."""
    node.exec(
        f"test -e {CLOCK_FILE} || {{ mkdir -p $(dirname {CLOCK_FILE}) && echo +0 > {CLOCK_FILE}; }}"
        f" && chmod 644 {CLOCK_FILE}"
    )


def wait_until(what: str, probe: Callable[[], bool], timeout: float, every: float = 0.5) -> None:
    """Poll `probe` until it is true; an infrastructure error names what never happened."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except Exception as e:
            last = e
        time.sleep(every)
    raise InfraError(f"{what} did not happen within {timeout:g}s" + (f": {last}" if last else ""))
