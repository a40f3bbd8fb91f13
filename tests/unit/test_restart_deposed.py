"""The restart-deposed fault's choice before it strikes: with two members writable already (an
earlier fault split the cluster), it crashes nothing, rather than crash the newer primary and
rejoin it under the older one (what a bench row showed before the check)."""

from __future__ import annotations

from typing import Any

from clusters.kinds.repmgr import RepmgrCluster, RepmgrPoll
from core.polls import Record
from nemesis.restart_deposed import RestartDeposed


class Split(RepmgrCluster):
    """The repmgr kind's declarations with a poll that says two members take writes, and no
    nodes to strike: a strike would fail loudly."""

    def __init__(self, writable: list[str]) -> None:
        self.options = self.checked_options({})
        self.writable = writable
        self.crashed: list[str] = []

    def poll(self) -> dict[str, Record]:
        return {n: RepmgrPoll(writable=n in self.writable, standby=n not in self.writable)
                for n in ("n1", "n2", "n3")}  # fmt: skip

    def crash_postgres(self, node: Any) -> str:
        self.crashed.append(node.name)
        return "crashed"


def test_two_writable_members_are_left_as_they_are() -> None:
    cluster = Split(["n1", "n2"])
    done = RestartDeposed().start(cluster)
    assert done["deposed"] is None and cluster.crashed == []
    assert done["why"] == "n1 and n2 take writes already: no one primary to depose"
    assert RestartDeposed().stop(cluster)["rejoined"] is None
