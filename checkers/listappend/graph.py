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
_SLICE = 1 << 20  # edges handed to rustworkx at a time


class Meta(Protocol):
    """What process and realtime order need of a transaction (a Txn has it)."""

    index: int
    complete: int
    process: int
    type: str


TYPES = ("ok", "info", "fail")


@dataclass(frozen=True)
class Txns:
    """Every client transaction's order facts as columns, in invocation order: ten million
    transactions as objects (and the dict of their processes) were gigabytes of the judge's
    peak, as arrays they are a few hundred megabytes."""

    index: np.ndarray  # int64, ascending: the invocation's history index
    complete: np.ndarray  # int64: the completion's index (the invocation's if none)
    process: np.ndarray  # int64
    type: np.ndarray  # int8: a position in TYPES

    @classmethod
    def of(cls, txns: Iterable[Meta]) -> Txns:
        rows = sorted((t.index, t.complete, t.process, TYPES.index(t.type)) for t in txns)
        columns = np.array(rows, dtype=np.int64).reshape(-1, 4).T
        return cls(columns[0], columns[1], columns[2], columns[3].astype(np.int8))

    def __len__(self) -> int:
        return len(self.index)

    def where(self, mask: np.ndarray) -> Txns:
        return Txns(self.index[mask], self.complete[mask], self.process[mask], self.type[mask])

    def is_(self, *types: str) -> np.ndarray:
        return np.isin(self.type, [TYPES.index(t) for t in types])

    def process_of(self, indices: Iterable[int]) -> dict[int, int]:
        """The processes of these transactions (by invocation index), those found."""
        wanted = np.fromiter(indices, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.index, wanted), max(len(self) - 1, 0))
        found = (self.index[at] == wanted) if len(self) else np.zeros(len(wanted), dtype=bool)
        return dict(zip(wanted[found].tolist(), self.process[at[found]].tolist(), strict=True))


@dataclass
class Edges:
    """Typed edges as parallel arrays, appended to in bulk."""

    src: array = field(default_factory=lambda: array("q"))
    dst: array = field(default_factory=lambda: array("q"))
    kind: array = field(default_factory=lambda: array("b"))

    def extend(self, src: np.ndarray, dst: np.ndarray, kind: int) -> None:
        """Edges of one kind from two int64 arrays."""
        self.src.frombytes(np.ascontiguousarray(src, dtype=np.int64).tobytes())
        self.dst.frombytes(np.ascontiguousarray(dst, dtype=np.int64).tobytes())
        self.kind.frombytes(np.full(len(src), kind, dtype=np.int8).tobytes())

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


def process_edges(txns: Txns, out: Edges) -> None:
    """Each process's ok transactions in completion order (edges in their heads' completion
    order)."""
    ok = txns.where(txns.is_("ok"))
    order = np.lexsort((ok.complete, ok.process))  # by process, then completion
    same = ok.process[order[1:]] == ok.process[order[:-1]]
    src, dst = order[:-1][same], order[1:][same]
    by_head = np.argsort(ok.complete[dst], kind="stable")
    out.extend(ok.index[src[by_head]], ok.index[dst[by_head]], PROCESS)


def realtime_edges(txns: Txns, out: Edges) -> None:
    """T1 → T2 when T1 completed ok before T2 was invoked, kept sparse as Elle does: a completed
    transaction stays on the frontier until a transaction invoked after its completion
    completes ok, and every transaction invoked while it is there follows it. Computed from
    that rule with arrays: the frontier walked event by event was, for ten million
    transactions, twenty million tuples."""
    ok = txns.where(txns.is_("ok"))
    # each ok transaction's end on the frontier: the first completion among the ok
    # transactions invoked after it completed (their index order is ascending)
    later_min = np.minimum.accumulate(ok.complete[::-1])[::-1]
    first_after = np.searchsorted(ok.index, ok.complete, side="right")
    leaves = np.append(later_min, np.iinfo(np.int64).max)[first_after]
    # every transaction invoked while a frontier member is there: a range of txns.index
    lo = np.searchsorted(txns.index, ok.complete, side="right")
    hi = np.searchsorted(txns.index, leaves, side="left")
    counts = np.maximum(hi - lo, 0)
    members = np.repeat(np.arange(len(ok)), counts)
    heads = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    heads += np.repeat(lo, counts)
    # in the walk's order: by the follower's invocation, then the member's completion
    order = np.lexsort((ok.complete[members], heads))
    out.extend(ok.index[members[order]], txns.index[heads[order]], REALTIME)


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
    # pairs made a slice at a time as rustworkx takes them: the ends of all edges as Python
    # integers at once were gigabytes for ten million transactions
    for at in range(0, len(s), _SLICE):
        dg.extend_from_edge_list(
            zip(s[at : at + _SLICE].tolist(), d[at : at + _SLICE].tolist(), strict=True)
        )
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
