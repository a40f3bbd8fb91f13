"""The dependency graph on the driver: edges arrive as integer arrays (from Spark or from the
per-key analysis run in process), the strongly connected components are found by rustworkx, and
only the edges inside a component, where cycles can be, become a Python adjacency for the search.

Process and realtime edges come from the transactions' order alone, so they are built here.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import rustworkx as rx

WW, WR, RW, PROCESS, REALTIME = 1, 2, 4, 8, 16
EDGE_NAMES = {WW: "ww", WR: "wr", RW: "rw", PROCESS: "process", REALTIME: "realtime"}
NO_ROW = -1  # the row of an edge with no data reason (process, realtime)


class Meta(Protocol):
    """What process and realtime order need of a transaction (a Txn has it)."""

    index: int
    complete: int
    process: int
    type: str


@dataclass
class Edges:
    """Typed edges as parallel arrays, appended to in bulk."""

    src: array = field(default_factory=lambda: array("q"))
    dst: array = field(default_factory=lambda: array("q"))
    kind: array = field(default_factory=lambda: array("b"))

    def extend(self, src: Iterable[int], dst: Iterable[int], kind: int) -> None:
        before = len(self.src)
        self.src.extend(src)
        self.dst.extend(dst)
        self.kind.extend([kind] * (len(self.src) - before))

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class Graph:
    """Edges as adjacency masks; `row` keeps, per (edge, type), where its reason can be found."""

    out: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    row: dict[tuple[int, int, int], int] = field(default_factory=dict)
    # the sizes of the components of two or more transactions, largest first: how much of the
    # history the cycle search had to decide (a report says it beside the verdict)
    components: list[int] = field(default_factory=list)

    def add(self, a: int, b: int, kind: int, row: int = NO_ROW) -> None:
        if a == b:
            return
        edges = self.out[a]
        if not edges.get(b, 0) & kind:
            edges[b] = edges.get(b, 0) | kind
            self.row[(a, b, kind)] = row


def process_edges(txns: Iterable[Meta], out: Edges) -> None:
    """Each process's ok transactions in completion order."""
    last: dict[int, int] = {}
    src, dst = array("q"), array("q")
    for t in sorted((t for t in txns if t.type == "ok"), key=lambda t: t.complete):
        if t.process in last:
            src.append(last[t.process])
            dst.append(t.index)
        last[t.process] = t.index
    out.extend(src, dst, PROCESS)


def realtime_edges(txns: Iterable[Meta], out: Edges) -> None:
    """T1 → T2 when T1 completed ok before T2 was invoked, kept sparse as Elle does: a completed
    transaction leaves the frontier once a later one that follows it completes."""
    events = []
    for t in txns:
        events.append((t.index, 0, t.index))
        if t.type == "ok":
            events.append((t.complete, 1, t.index))
    events.sort()
    frontier: dict[int, None] = {}
    before: dict[int, list[int]] = {}
    src, dst = array("q"), array("q")
    for _, kind, t in events:
        if kind == 0:
            before[t] = list(frontier)
            src.extend(before[t])
            dst.extend([t] * len(frontier))
        else:
            for a in before.pop(t, ()):
                frontier.pop(a, None)
            frontier[t] = None
    out.extend(src, dst, REALTIME)


def build(edges: Edges) -> tuple[Graph, int]:
    """The graph cut down to its strongly connected components of two or more transactions,
    and the number of distinct (from, to) pairs in the whole graph.

    A history without a cycle (most) is one topological sort in rustworkx: the components
    are only listed when there is a cycle to find."""
    if not len(edges):
        return Graph(), 0
    src = np.frombuffer(edges.src, dtype=np.int64)
    dst = np.frombuffer(edges.dst, dtype=np.int64)
    ids, s, d = _dense(src, dst)
    pairs = np.sort(s * len(ids) + d)
    pair_count = 1 + int(np.count_nonzero(pairs[1:] != pairs[:-1]))
    dg = rx.PyDiGraph(node_count_hint=len(ids), edge_count_hint=len(s))
    # pairs made one at a time as rustworkx takes them: a list of millions of tuples is most of
    # the judge's peak memory
    dg.extend_from_edge_list(zip(s.tolist(), d.tolist(), strict=True))
    g = Graph()
    if rx.is_directed_acyclic_graph(dg):
        return g, pair_count
    scc = np.full(len(ids), -1, dtype=np.int64)
    for number, component in enumerate(rx.strongly_connected_components(dg)):
        if len(component) > 1:
            scc[list(component)] = number
            g.components.append(len(component))
    g.components.sort(reverse=True)
    inside = np.flatnonzero((scc[s] >= 0) & (scc[s] == scc[d]))
    kinds = np.frombuffer(edges.kind, dtype=np.int8)
    for row, a, b, kind in zip(
        inside.tolist(),
        ids[s[inside]].tolist(),
        ids[d[inside]].tolist(),
        kinds[inside].tolist(),
        strict=True,
    ):
        g.add(a, b, kind, row if kind < PROCESS else NO_ROW)  # order edges have no reason
    return g, pair_count


def _dense(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct transactions (sorted), and each edge's ends as numbers into them. History
    indices are dense, so a table over their range does it without a sort; sparse or huge ones
    are sorted."""
    lo, hi = int(min(src.min(), dst.min())), int(max(src.max(), dst.max()))
    if hi - lo > 4 * (len(src) + len(dst)) + 1024:
        ids, dense = np.unique(np.concatenate([src, dst]), return_inverse=True)
        return ids, dense[: len(src)], dense[len(src) :]
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[src - lo] = True
    present[dst - lo] = True
    number = np.cumsum(present) - 1
    return np.flatnonzero(present) + lo, number[src - lo], number[dst - lo]
