"""Seed 004's state machine, as pure decisions: given the cluster state (G, P, S, A[], init_wal),
the peers present in ZooKeeper's order and this peer's WAL position, what this peer does now.

Only the peer that will be P of a new generation declares it, in exactly the seed's three cases:
the first generation (no state yet, this peer's ephemeral node first, another peer present), the
sync replacing a primary whose ephemeral node went away (its WAL at least init_wal, an async
present), and the primary replacing a sync that went away (an async present). The new state is
written by test-and-set over the one it was derived from, so of two declarers one wins. The
primary alone also keeps A[] (appending peers that arrive, dropping those that leave, never
reordering), within its generation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True)
class ClusterState:
    g: int  # the generation
    p: str  # its primary
    s: str  # its sync peer (assigned: not necessarily caught up yet)
    a: tuple[str, ...]  # the async peers, in replication order
    init_wal: int  # P's WAL position when the generation began

    def to_json(self) -> bytes:
        value = {"generation": self.g, "primary": self.p, "sync": self.s,
                 "async": list(self.a), "init_wal": self.init_wal}  # fmt: skip
        return json.dumps(value, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ClusterState:
        v = json.loads(data)
        return cls(v["generation"], v["primary"], v["sync"], tuple(v["async"]), v["init_wal"])


Kind = Literal["declare", "primary", "sync", "async", "wait", "stuck"]


@dataclass(frozen=True)
class Decision:
    """What the peer does: `declare` writes `state` (a new generation) by test-and-set; `primary`
    serves, writing `state` first when it changed A[] (same generation); `sync` and `async`
    replicate from `upstream`; `wait` and `stuck` do nothing yet (stuck: only P's return or an
    operator can move the cluster on)."""

    kind: Kind
    why: str
    state: ClusterState | None = None
    upstream: str | None = None


def decide(state: ClusterState | None, me: str, present: Sequence[str], wal: int) -> Decision:
    """This peer's next step. `present`: the peers whose ephemeral nodes exist, in ZooKeeper's
    order (this one included when its session holds); `wal`: this peer's WAL position."""
    if state is None:
        if present[:1] == [me] and len(present) >= 2:
            first = ClusterState(1, me, present[1], tuple(present[2:]), wal)
            return Decision("declare", "no cluster state yet, and this peer is first", first)
        return Decision(
            "wait", "no cluster state yet; the first peer in ZooKeeper's order declares"
        )
    asyncs = [a for a in state.a if a in present]
    if me == state.p:
        if state.s not in present:
            if not asyncs:
                return Decision("primary", f"sync {state.s} is gone and no async can replace it")
            return Decision("declare", f"sync {state.s} is gone", _next(state, me, asyncs, wal))
        kept = _asyncs_kept(state, present)
        if kept != state.a:
            return Decision("primary", "A[] follows the peers present", replace(state, a=kept))
        return Decision("primary", f"primary of generation {state.g}")
    if me == state.s:
        if state.p in present:
            return Decision("sync", f"sync of generation {state.g}", upstream=state.p)
        if wal < state.init_wal:
            why = (f"primary {state.p} is gone, but this sync's WAL {wal} is short of init_wal "
                   f"{state.init_wal}: it never caught up, so it must not take over")  # fmt: skip
            return Decision("stuck", why)
        if not asyncs:
            return Decision("stuck", f"primary {state.p} is gone and no async could become sync")
        return Decision("declare", f"primary {state.p} is gone", _next(state, me, asyncs, wal))
    if me in state.a:
        at = state.a.index(me)
        upstream = state.s if at == 0 else state.a[at - 1]
        return Decision("async", f"async of generation {state.g}", upstream=upstream)
    return Decision("wait", "not in the cluster state: the primary will add this peer to A[]")


def _next(state: ClusterState, me: str, asyncs: list[str], wal: int) -> ClusterState:
    """Generation G+1 declared by `me`: the first async present becomes S, the others stay in
    order; init_wal is `me`'s WAL now."""
    return ClusterState(state.g + 1, me, asyncs[0], tuple(asyncs[1:]), wal)


def _asyncs_kept(state: ClusterState, present: Sequence[str]) -> tuple[str, ...]:
    """A[] with the peers gone dropped and newcomers appended in ZooKeeper's order."""
    kept = [a for a in state.a if a in present]
    members = {state.p, state.s, *kept}
    return tuple(kept + [peer for peer in present if peer not in members])
