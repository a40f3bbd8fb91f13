"""The restart-deposed fault: a failover, then the old primary started again as it was, on a kind
whose manager fences nothing (clusters.kinds.base.RestartsDeposed: repmgr).

At its start the primary's Postgres crashes (stopped at once), the fault watches for the manager
to promote another member, for as long as the kind's failover takes and a margin, and then
starts the old primary's Postgres on its data directory unchanged, as an operator or an init
system does after a crash: the chain of two faults that one fault at a moment does not make
(a failover, then the deposed primary back). Unless the manager or its fencing hooks stop it,
two members then take writes, and clients that look for a writable node may find the old one.
At its end the old primary is brought back as a standby of the one that took over, as the
manager's manual says, so that whatever it acknowledged meanwhile is gone, as it would be.
Where two members take writes already (an earlier fault left the cluster split), there is no
one primary to depose: the fault does nothing and says why (crashing the newer one and
rejoining it to the older would send the cluster's history back by its own hand).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from clusters.kinds.base import ClusterKind, RestartsDeposed
from nemesis.fault import UnplannedFault, by_name

MARGIN_S = 30.0  # beyond the kind's failover time: its election and promotion may run late
POLL_S = 1.0


class RestartDeposed(UnplannedFault):
    name = "restart-deposed"

    def __init__(self) -> None:
        self.deposed: str | None = None  # the old primary, until it is back as a standby
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        if not isinstance(cluster, RestartsDeposed):
            raise TypeError(f"the {cluster.name} cluster fences its old primary by itself")
        writable = sorted(n for n, s in cluster.poll().items() if s.leads())
        if len(writable) > 1:  # a split already: crashing one would not make a failover
            why = f"{' and '.join(writable)} take writes already: no one primary to depose"
            return self.plan() | {"deposed": None, "why": why}
        old = cluster.leader()
        if old is None:
            return self.plan() | {"deposed": None, "why": "no node takes writes"}
        (node,) = by_name(cluster, [old])
        self.deposed = old
        crashed = cluster.crash_postgres(node)
        crashed_at = time.monotonic()
        wait = cluster.failover_s(cluster.options) + MARGIN_S
        promoted = None
        while time.monotonic() - crashed_at < wait and not self.cancelled.wait(POLL_S):
            if (leader := cluster.leader()) not in (None, old):
                promoted = leader
                break
        took = time.monotonic() - crashed_at
        started = cluster.start_as_it_was(node)
        return self.plan() | {
            "deposed": old,
            "crashed": crashed,
            "promoted": promoted,
            "waited_s": round(took, 1),
            "restarted": started,
        }

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        if self.deposed is None or not isinstance(cluster, RestartsDeposed):
            return self.plan() | {"rejoined": None}
        (node,) = by_name(cluster, [self.deposed])
        done = cluster.rejoin_deposed(node)
        self.deposed = None
        return self.plan() | done
