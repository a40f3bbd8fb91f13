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
    if spec.rw == "one":
        starts = sorted(_one_rw_starts(g, members, spec, deadline))
    elif spec.rw in ("nonadjacent", "adjacent"):
        starts = sorted(_many_rw_starts(g, members, spec))
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


KINDS = (WW, WR, RW, PROCESS, REALTIME)


def _bits(needs: tuple[int, ...], kind: int) -> int:
    """Which of a spec's needed groups an edge of `kind` meets."""
    return sum(1 << i for i, group in enumerate(needs) if kind & group)


def _spec_edges(g: Graph, ids: list[int], node: dict[int, int], spec: Spec):
    """Each (from, to, kind) among `ids` (numbered by `node`) of a kind the spec allows."""
    for a in ids:
        for b, mask in g.out[a].items():
            if b in node:
                for kind in KINDS:
                    if mask & kind & spec.allowed:
                        yield a, b, kind


def _one_rw_starts(g: Graph, members: set[int], spec: Spec, deadline: float) -> set[int]:
    """The tails of the rw edges whose head leads back to their tail by the spec's other edges,
    meeting every needed kind on the way: a cycle with one rw edge can only begin at one of them
    (rotated to begin with its rw edge), so the search from any other vertex would walk the whole
    component to find nothing, which on a large component (a split brain's thousands of
    transactions) is what ran out of time.

    Walks, not simple paths, so this keeps every start the search can succeed from and maybe a
    few it cannot. Reachability is over the graph layered by which needs are met (an edge moves
    up a layer when it meets one), condensed, with each component's reachable targets as a
    bitset, filled in reverse topological order."""
    needs = spec.needs
    layers = 1 << len(needs)
    full = layers - 1
    ids = sorted(members)
    node = {t: i for i, t in enumerate(ids)}
    edges: list[tuple[int, int]] = []
    rws: list[tuple[int, int]] = []  # (tail, head) of each rw edge
    for a, b, kind in _spec_edges(g, ids, node, spec):
        if kind == RW:
            rws.append((a, b))
            continue
        up = _bits(needs, kind)
        for m in range(layers):
            edges.append((node[a] * layers + m, node[b] * layers + (m | up)))
    if not rws:
        return set()
    dg = rx.PyDiGraph(multigraph=False)
    dg.add_nodes_from(range(len(ids) * layers))
    dg.add_edges_from_no_data(edges)
    dag = rx.condensation(dg)
    comp = [0] * (len(ids) * layers)
    for c in dag.node_indices():
        for layered in dag[c]:
            comp[layered] = c
    at = _bits(needs, RW)
    queries = [(a, comp[node[b] * layers + at], comp[node[a] * layers + full]) for a, b in rws]
    bit = {target: i for i, target in enumerate(sorted({t for _, _, t in queries}))}
    reach = [0] * len(dag)
    for done, c in enumerate(reversed(list(rx.topological_sort(dag)))):
        if done % 1024 == 0 and time.monotonic() > deadline:
            raise Timeout
        r = 1 << bit[c] if c in bit else 0
        for succ in dag.successor_indices(c):
            r |= reach[succ]
        reach[c] = r
    return {a for a, source, target in queries if reach[source] >> bit[target] & 1}


def _many_rw_starts(g: Graph, members: set[int], spec: Spec) -> set[int]:
    """The tails of the rw edges that can begin a cycle of two or more rw edges: a cycle's edges,
    each paired with whether the edge before it was rw, lie in one strongly connected component
    of the graph so paired (for `nonadjacent`, where no rw edge follows an rw edge), and that
    component holds two distinct rw edges, an edge of every needed kind, and (for `adjacent`)
    an rw edge after an rw edge. Any other start is one the search would walk from in vain."""
    needs = spec.needs
    ids = sorted(members)
    node = {t: i for i, t in enumerate(ids)}
    edges: list[tuple[int, int, tuple[int, int, int, bool]]] = []
    for a, b, kind in _spec_edges(g, ids, node, spec):
        for last in (0, 1):
            if kind == RW and last and spec.rw == "nonadjacent":
                continue
            head = node[b] * 2 + (kind == RW)
            edges.append((node[a] * 2 + last, head, (a, b, kind, bool(last))))
    dg = rx.PyDiGraph()
    dg.add_nodes_from(range(len(ids) * 2))
    comp = [-1] * (len(ids) * 2)
    dg.add_edges_from([(x, y, None) for x, y, _ in edges])
    for number, c in enumerate(rx.strongly_connected_components(dg)):
        for q in c:
            comp[q] = number
    rw_edges: dict[int, set[tuple[int, int]]] = {}
    met: dict[int, int] = {}
    after_rw: set[int] = set()
    for x, y, (a, b, kind, last) in edges:
        c = comp[x]
        if c != comp[y]:
            continue
        met[c] = met.get(c, 0) | _bits(needs, kind)
        if kind == RW:
            rw_edges.setdefault(c, set()).add((a, b))
            if last:
                after_rw.add(c)
    full = (1 << len(needs)) - 1
    good = {
        c
        for c, rw in rw_edges.items()
        if len(rw) >= 2 and met[c] == full and (spec.rw != "adjacent" or c in after_rw)
    }
    return {a for c in good for a, _ in rw_edges[c]}


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
            for kind in KINDS:
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
