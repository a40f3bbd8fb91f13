"""The cycle search starts only where a cycle of the wanted type can begin. A large component
in which some wanted type has no cycle (a split brain's thousands of transactions) was searched
from every vertex, walked whole each time, and ran out of time: that part of the history was
left undecided."""

from __future__ import annotations

import time

from checkers.listappend import cycles, models
from checkers.listappend.graph import REALTIME, RW, Graph


def two_lanes(n: int, reach: int = 10) -> Graph:
    """Lanes A and B of n transactions each, realtime edges forward within each lane (to the
    next `reach`), rw edges A_i → B_i and B_i → A_{i+1}, and B_last → A_0 closing the ring.
    Every cycle crosses between the lanes by rw edges only, and no lane leads back along
    itself, so no cycle has exactly one rw edge; the rw edges alone form a G2-item ring, and
    A_0 ⇝ A_i → B_i ⇝ B_last → A_0 is a G-nonadjacent-item-realtime cycle."""
    g = Graph()
    a, b = (lambda i: i), (lambda i: n + i)
    for lane in (a, b):
        for i in range(n):
            for j in range(i + 1, min(n, i + reach + 1)):
                g.add(lane(i), lane(j), REALTIME)
    for i in range(n):
        g.add(a(i), b(i), RW)
        if i + 1 < n:
            g.add(b(i), a(i + 1), RW)
    g.add(b(n - 1), a(0), RW)
    return g


def test_a_large_component_without_single_rw_cycles_is_decided() -> None:
    g = two_lanes(2500)
    wanted = [n for n in cycles.ORDER if n.startswith(("G-single", "G-nonadjacent", "G2-item"))]
    began = time.monotonic()
    found, timeouts = cycles.search(g, wanted, 60.0, models.implied)
    assert timeouts == [], f"undecided after {time.monotonic() - began:.1f} s: {timeouts}"
    assert "G-single-item-realtime" not in found and "G-single-item" not in found
    assert "G2-item" in found and "G-nonadjacent-item-realtime" in found
    (cycle,) = found["G-nonadjacent-item-realtime"]
    assert cycles.classify([k for _, _, k in cycle]) == "G-nonadjacent-item-realtime"
    assert cycle[0][0] == cycle[-1][1]  # closed


def test_the_starts_kept_are_those_a_cycle_can_begin_at() -> None:
    """A triangle with one rw edge can only begin at that edge's tail; a vertex outside it, with
    an rw edge of its own whose head never leads back, is not a start."""
    g = Graph()
    g.add(1, 2, RW)
    g.add(2, 3, REALTIME)
    g.add(3, 1, REALTIME)
    g.add(3, 4, RW)
    g.add(4, 3, REALTIME)  # 3 → 4 → 3: one rw edge, a second start
    g.add(1, 5, RW)  # 5 leads nowhere
    members = {1, 2, 3, 4, 5}
    spec = cycles.SPECS["G-single-item-realtime"]
    assert cycles._one_rw_starts(g, members, spec, time.monotonic() + 5) == {1, 3}
    # without realtime edges allowed, nothing leads back
    plain = cycles.SPECS["G-single-item"]
    assert cycles._one_rw_starts(g, members, plain, time.monotonic() + 5) == set()
