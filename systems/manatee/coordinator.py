"""The sitter's side of ZooKeeper: its ephemeral node, the peers present in ZooKeeper's order, and
the cluster state read and written by test-and-set (kazoo, as Debian packages it).

Layout under `/manatee/<cluster>`: `election/<peer>-<sequence>`, one ephemeral sequential node per
peer session (its data the peer's name); `state`, the cluster state as JSON, created once (the
first generation) and then only set at the version it was read at.
"""

from __future__ import annotations

import contextlib

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from .state import ClusterState

ROOT = "/manatee"


class Coordinator:
    """One peer's session with ZooKeeper."""

    def __init__(
        self, hosts: str, cluster: str, me: str, address: str = "", timeout: float = 10.0
    ) -> None:
        self.me = me
        self.address = address  # where its Postgres listens (host:port), for the others
        self.timeout = timeout  # the session's, s
        self.base = f"{ROOT}/{cluster}"
        self.zk = KazooClient(hosts=hosts, timeout=timeout)
        self.node: str | None = None

    def join(self) -> None:
        """Establish the session and create this peer's ephemeral node."""
        self.zk.start()
        self.zk.ensure_path(f"{self.base}/election")
        self.node = self.zk.create(f"{self.base}/election/{self.me}-", self.address.encode(),
                                   ephemeral=True, sequence=True)  # fmt: skip

    def present(self) -> list[str]:
        """The peers whose ephemeral nodes exist, in ZooKeeper's (creation) order."""
        children = self.zk.get_children(f"{self.base}/election")
        ordered = sorted(children, key=lambda c: c.rsplit("-", 1)[1])
        return list(dict.fromkeys(c.rsplit("-", 1)[0] for c in ordered))

    def address_of(self, peer: str) -> str | None:
        """Where a present peer's Postgres listens, as its ephemeral node says."""
        for child in self.zk.get_children(f"{self.base}/election"):
            if child.rsplit("-", 1)[0] == peer:
                with contextlib.suppress(NoNodeError):
                    return self.zk.get(f"{self.base}/election/{child}")[0].decode()
        return None

    def read(self) -> tuple[ClusterState | None, int]:
        """The cluster state and its version (None and -1 before the first generation)."""
        try:
            data, stat = self.zk.get(f"{self.base}/state")
        except NoNodeError:
            return None, -1
        return ClusterState.from_json(data), stat.version

    def write(self, state: ClusterState, version: int) -> bool:
        """Test-and-set: write `state` over the version read (-1: create the first); False when
        another peer wrote first."""
        try:
            if version < 0:
                self.zk.create(f"{self.base}/state", state.to_json())
            else:
                self.zk.set(f"{self.base}/state", state.to_json(), version=version)
        except (BadVersionError, NodeExistsError):
            return False
        return True

    def leave(self) -> None:
        """End the session: its ephemeral node goes at once, as an expired session's does."""
        self.zk.stop()
        self.zk.close()
