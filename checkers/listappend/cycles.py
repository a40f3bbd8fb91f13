"""Cycle search in the dependency graph, as Elle does it: strongly connected components first
(rustworkx, compiled), then inside each a breadth-first search for the shortest cycle of each
anomaly type, in Elle's order of preference, within a time budget.

The search walks a product of the graph and a small state (rw edges taken, whether the last edge
was rw, whether an rw pair was adjacent, which required kinds were seen), so each type's rules
are checked as the cycle is built and the first cycle found is the shortest from its start.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import rustworkx as rx

from checkers.listappend.graph import PROCESS, REALTIME, RW, WR, WW, Graph


@dataclass(frozen=True)
class Spec:
    name: str
    allowed: int
    rw: str  # "none", "one" (exactly one), "nonadjacent" (≥2, never adjacent), "adjacent" (≥2)
    needs: tuple[int, ...] = ()  # each group: at least one edge of one of these kinds


BASE = [
    Spec("G0", WW, "none"),
    Spec("G1c", WW | WR, "none", (WR,)),
    Spec("G-single-item", WW | WR | RW, "one"),
    Spec("G-nonadjacent-item", WW | WR | RW, "nonadjacent"),
    Spec("G2-item", WW | WR | RW, "adjacent"),
]


def variant(spec: Spec, suffix: str, kind: int) -> Spec:
    return Spec(f"{spec.name}-{suffix}", spec.allowed | kind, spec.rw, (*spec.needs, kind))


SPECS = {s.name: s for s in BASE}
SPECS |= {v.name: v for s in BASE for v in (variant(s, "process", PROCESS),)}
SPECS |= {v.name: v for s in BASE for v in (variant(s, "realtime", REALTIME),)}

# Elle's order of preference: the types that say most about a history first
ORDER = [
    "G-single-item", "G0", "G-nonadjacent-item", "G-single-item-process", "G1c",
    "G-nonadjacent-item-process", "G-single-item-realtime", "G2-item",
    "G-nonadjacent-item-realtime", "G0-process", "G1c-process", "G2-item-process",
    "G0-realtime", "G1c-realtime", "G2-item-realtime",
]  # fmt: skip


class Timeout(Exception):
    pass


def components(g: Graph, members: set[int] | None = None, kinds: int = ~0) -> list[list[int]]:
    """The strongly connected components with more than one transaction, of the whole graph or
    of `members` joined only by edges of `kinds`."""
    if members is None:
        ids = sorted(set(g.out) | {b for edges in g.out.values() for b in edges})
    else:
        ids = sorted(members)
    node = {t: i for i, t in enumerate(ids)}
    edges = [
        (node[a], node[b])
        for a in ids
        for b, mask in g.out.get(a, {}).items()
        if mask & kinds and b in node
    ]
    dg = rx.PyDiGraph(multigraph=False)
    dg.add_nodes_from(ids)
    dg.add_edges_from_no_data(edges)
    return [sorted(ids[i] for i in c) for c in rx.strongly_connected_components(dg) if len(c) > 1]


def classify(kinds: list[int]) -> str:
    """Elle's name for a cycle whose consecutive edges have these kinds."""
    rws = [k == RW for k in kinds]
    n = sum(rws)
    if n == 1:
        base = "G-single-item"
    elif n >= 2:
        adjacent = any(rws[i] and rws[i - 1] for i in range(len(rws)))
        base = "G2-item" if adjacent else "G-nonadjacent-item"
    else:
        base = "G1c" if WR in kinds else "G0"
    if REALTIME in kinds:
        return base + "-realtime"
    return base + "-process" if PROCESS in kinds else base


def find(
    g: Graph, members: set[int], spec: Spec, deadline: float
) -> list[tuple[int, int, int]] | None:
    """The shortest cycle (as (a, b, kind) steps) inside `members` that `spec` allows and that
    is named `spec.name`; None if there is none. Raises Timeout past `deadline`.

    A cycle of the spec's edges lies inside one component of the graph cut down to those edges,
    so only those components are searched (for G0 and G1c this usually leaves nothing)."""
    for part in components(g, members, spec.allowed):
        cycle = _find_in(g, set(part), spec, deadline)
        if cycle is not None:
            return cycle
    return None


def _find_in(
    g: Graph, members: set[int], spec: Spec, deadline: float
) -> list[tuple[int, int, int]] | None:
    starts = sorted(members)
    if spec.rw in ("nonadjacent", "adjacent", "one"):
        # a cycle with rw edges can be rotated to begin with one: start only where one leaves
        starts = [a for a in starts if any(k & RW and b in members for b, k in g.out[a].items())]
    steps = 0
    for s in starts:
        found = _bfs(g, members, spec, s)
        for cycle in found:
            steps += 1
            if steps % 64 == 0 and time.monotonic() > deadline:
                raise Timeout
            if cycle is None:
                continue
            if classify([k for _, _, k in cycle]) == spec.name:
                return cycle
        if time.monotonic() > deadline:
            raise Timeout
    return None


def _bfs(g: Graph, members: set[int], spec: Spec, s: int):
    """Breadth-first over (vertex, state); yields each closed cycle back at `s` (None now and
    then so the caller can look at the clock)."""
    needs = spec.needs
    start = (s, 0, False, False, 0)  # vertex, rw count (≤2), last edge rw, adjacent rw, needs met
    parent: dict[tuple, tuple | None] = {start: None}
    via: dict[tuple, int] = {}
    queue = deque([start])
    expanded = 0
    while queue:
        state = queue.popleft()
        v, n, last_rw, adj, met = state
        expanded += 1
        if expanded % 256 == 0:
            yield None
        for b, mask in g.out[v].items():
            if b not in members:
                continue
            for kind in (WW, WR, RW, PROCESS, REALTIME):
                if not mask & kind & spec.allowed:
                    continue
                first = v == s and n == 0 and state == start
                if spec.rw != "none" and spec.rw != "one" and first and kind != RW:
                    continue
                if spec.rw == "one" and first and kind != RW:
                    continue
                is_rw = kind == RW
                n2 = min(n + is_rw, 2)
                if spec.rw == "one" and n + is_rw > 1:
                    continue
                if spec.rw == "nonadjacent" and is_rw and last_rw:
                    continue
                adj2 = adj or (is_rw and last_rw)
                met2 = met | sum(1 << i for i, grp in enumerate(needs) if kind & grp)
                nxt = (b, n2, is_rw, adj2, met2)
                if b == s:
                    if _closes(spec, nxt, needs):
                        yield _path(parent, via, state, s, kind)
                    continue
                if nxt in parent or _on_path(parent, state, b):
                    continue
                parent[nxt] = state
                via[nxt] = kind
                queue.append(nxt)


def _closes(spec: Spec, state: tuple, needs: tuple[int, ...]) -> bool:
    _, n, last_rw, adj, met = state
    if met != (1 << len(needs)) - 1:
        return False
    if spec.rw == "none":
        return n == 0
    if spec.rw == "one":
        return n == 1
    if spec.rw == "nonadjacent":
        return n >= 2 and not last_rw  # the closing edge meets the first one, an rw
    return n >= 2 and (adj or last_rw)


def _on_path(parent: dict, state: tuple, b: int) -> bool:
    """Whether the walk to `state` already passed through vertex `b` (cycles stay simple)."""
    while state is not None:
        if state[0] == b:
            return True
        state = parent[state]
    return False


def _path(
    parent: dict, via: dict, state: tuple, s: int, closing: int
) -> list[tuple[int, int, int]]:
    steps = []
    b = s
    kind = closing
    while state is not None:
        steps.append((state[0], b, kind))
        b = state[0]
        kind = via.get(state, 0)
        state = parent[state]
    steps.reverse()
    return steps


def search(
    g: Graph, wanted: list[str], budget: float, skip_implied
) -> tuple[dict[str, list[list[tuple[int, int, int]]]], list[dict]]:
    """Every SCC: at most one cycle per wanted type, in ORDER, skipping types implied by those
    already found there. Returns the cycles by type and the SCCs whose search timed out."""
    found: dict[str, list[list[tuple[int, int, int]]]] = {}
    timeouts = []
    for scc in components(g):
        members = set(scc)
        deadline = time.monotonic() + budget
        here: set[str] = set()
        for name in [n for n in ORDER if n in wanted]:
            if name in skip_implied(here):
                continue
            try:
                cycle = find(g, members, SPECS[name], deadline)
            except Timeout:
                timeouts.append({"type": name, "scc_size": len(scc), "searched": sorted(here)})
                break
            if cycle is not None:
                found.setdefault(name, []).append(cycle)
                here.add(name)
    return found, timeouts
