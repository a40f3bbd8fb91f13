"""What a cluster kind is: the software installed on a backend's nodes, and how to reach it."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from clusters.backend import Backend, Node
from harness.errors import InfraError


@dataclass(frozen=True)
class Endpoint:
    """Where a client bound to `node` connects."""

    node: str
    host: str
    port: int
    dbname: str
    user: str


class ClusterKind(ABC):
    """Installs, starts, inspects and tears down one kind of cluster on a backend's nodes."""

    name: ClassVar[str]

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

    @abstractmethod
    def leader(self) -> str | None:
        """The node that currently leads (takes writes), if the kind can tell."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """What an operator would look at: per node, is it up, its role and positions."""

    @abstractmethod
    def collect(self, dest: Path) -> None:
        """Copy every node's logs and state files into `dest/<node>/`."""

    def teardown(self) -> list[str]:
        return self.backend.down(self.cluster)


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
