"""Seed 003's history as one fault: partitions that change as the cluster elects, so that a
term's log reaches only some of the voters that elected it.

A fault drawn in advance cannot place seed 003's first step: the partition must change between
a term's votes and its first record, which on the safekeeper cluster is a second or two. This
fault watches the cluster's poll and moves the partition when the term is won. It needs two
computes and five safekeepers, A…E (in an order the seed draws); L is the compute that serves
when it starts, S the other one (any further compute stays with L):

1. `tail`: {L, A} | {S, B, C, D, E}. L writes a tail that only A gets, then loses its lease;
   S wins a term with B, C, D and E.
2. `split`, as soon as a safekeeper's term rises: {S, A, C, D} | {L, B, E}. The term's records
   reach C and D (their epoch moves on) but not B and E, which voted for it; A, which did not,
   is brought into the term from its restart LSN, the new records written over its tail.
3. `apart`: S and L each alone, until S's term has ended (its lease).
4. `corrupt`: {S, A, B, E} | {L} | {C, D}. S stands again; A, B and E elect it, and the donor is
   the voter with the highest (epoch, flush LSN).

In the epoch variant A, B and E still have the first epoch, so A's log wins and is committed:
the new records over the start of L's tail and the rest of L's tail after them, a log that no
proposer wrote. Once the fault heals, the next term's donor is C or D (a higher epoch) and its
log starts below what A, B and E reported committed (`term-below-commit`). In the term-history
variant A is truncated at the divergence point when it joins the term, and nothing is lost.

`start` runs the phases itself (a minute or two at most) and returns what each one saw; the
final partition stays until the fault's stop heals it. What is polled is what the harness
records anyway (the kind's `poll`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusters.kind import ClusterKind
from nemesis import grudges, partition
from nemesis.fault import Fault, on_nodes
from nemesis.grudges import Grudge

log = logging.getLogger(__name__)

SHAPE = "seed003"
KEEPERS = 5  # the seed's history needs five safekeepers: three of them elect twice
MIN_NODES = KEEPERS + 2
POLL_EVERY = 0.2  # seconds between polls while a phase waits: the split must beat the records
SETTLE = 3.0  # seconds a phase's partition stays once its condition holds
WAITS = {"leader": 30.0, "tail": 45.0, "split": 20.0, "apart": 15.0, "corrupt": 25.0}

Poll = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Cast:
    """Who plays which part of seed 003's history."""

    old: str  # L: the compute that serves when the fault starts
    new: str  # S: the compute that wins the split term
    others: tuple[str, ...]  # any further computes: kept with L, out of the way
    a: str
    b: str
    c: str
    d: str
    e: str


def cast(computes: list[str], keepers: list[str], leader: str, order: list[int]) -> Cast:
    """The parts, from the computes, the five safekeepers (in node order), the compute that
    leads and the seed's order of the safekeepers."""
    if len(keepers) != KEEPERS or len(computes) < 2 or leader not in computes:
        raise ValueError(
            f"seed 003's history needs {KEEPERS} safekeepers and two computes, one leading "
            f"(safekeepers {keepers}, computes {computes}, leader {leader})"
        )
    new = next(c for c in computes if c != leader)
    a, b, c, d, e = (keepers[i] for i in order)
    others = tuple(n for n in computes if n not in (leader, new))
    return Cast(leader, new, others, a, b, c, d, e)


def phase_grudge(phase: str, nodes: list[str], c: Cast) -> Grudge:
    """The partition of each phase (see the module's docstring)."""
    old = {c.old, *c.others}
    components = {
        "tail": [old | {c.a}, {c.new, c.b, c.c, c.d, c.e}],
        "split": [{c.new, c.a, c.c, c.d}, old | {c.b, c.e}],
        "apart": [{c.new}, old, {c.a, c.b, c.c, c.d, c.e}],
        "corrupt": [{c.new, c.a, c.b, c.e}, old, {c.c, c.d}],
    }[phase]
    return grudges.from_components(nodes, components)


def terms(polled: Poll, names: list[str]) -> list[int]:
    return [polled[n].get("term") or 0 for n in names if n in polled]


def flush(polled: Poll, name: str) -> int:
    return (polled.get(name) or {}).get("flush_lsn") or 0


def elected(polled: Poll, c: Cast, before: int) -> bool:
    """S's side has voted in a term above `before`: the moment to split its voters."""
    return max(terms(polled, [c.b, c.c, c.d, c.e]), default=0) > before


def recorded(polled: Poll, c: Cast, voters_flush: int, term: int) -> bool:
    """The split term's records reached C and D, and A has joined the term."""
    return (
        min(flush(polled, c.c), flush(polled, c.d)) > voters_flush
        and (polled.get(c.a) or {}).get("term", 0) >= term
    )


def stood_down(polled: Poll, c: Cast) -> bool:
    """S no longer leads a term (its lease ran out), so none of its followers is left."""
    state = polled.get(c.new)
    return state is not None and state.get("term") is None


def committed(polled: Poll, c: Cast, term: int) -> bool:
    """A, B and E elected a term above `term`, and one of them reports A's whole log committed
    (the proposer's commit LSN reaches each safekeeper with its next append)."""
    trio = [c.a, c.b, c.e]
    if any(n not in polled for n in trio) or min(terms(polled, trio)) <= term:
        return False
    return max(polled[n].get("commit_lsn") or 0 for n in trio) >= flush(polled, c.a)


class Seed003(Fault):
    name = "partition"

    def __init__(self, order: list[int]) -> None:
        self.order = order

    @classmethod
    def planned(cls, nodes: list[str], rng: random.Random) -> Seed003:
        return cls(rng.sample(range(KEEPERS), KEEPERS))

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name, "shape": SHAPE, "order": self.order}

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        began = time.monotonic()
        names = [n.name for n in cluster.nodes]
        phases: list[dict[str, Any]] = []
        value = self.plan() | {"mechanism": "iptables", "phases": phases}

        def at() -> float:
            return round(time.monotonic() - began, 2)

        polled = wait(cluster, lambda p: any(s.get("serving") for s in p.values()), "leader")
        if polled is None:
            return value | {"reached": False, "error": "no compute served"}
        computes = [n for n in names if "role" in polled.get(n, {})]
        keepers = [n for n in names if "flush_lsn" in polled.get(n, {})]
        leader = next(n for n in computes if polled.get(n, {}).get("serving"))
        c = cast(computes, keepers, leader, self.order)
        value["cast"] = {"L": c.old, "S": c.new, **dict(zip("ABCDE", self.keepers(c), strict=True))}

        def enter(phase: str) -> None:
            grudge = phase_grudge(phase, names, c)
            on_nodes(cluster.nodes, lambda node: partition.apply(node, grudge))
            phases.append({"phase": phase, "at_s": at(), "grudge": grudges.as_json(grudge)})

        before = max(terms(polled, keepers))
        enter("tail")
        polled = wait(cluster, lambda p: elected(p, c, before), "tail")
        if polled is None:
            return value | {"reached": False, "error": "S won no term"}
        voters_flush = max(flush(polled, c.b), flush(polled, c.e))
        term = max(terms(polled, [c.b, c.c, c.d, c.e]))
        phases[-1] |= {"term_won_s": at(), "term": term, "voters_flush": voters_flush}
        enter("split")
        polled = wait(cluster, lambda p: recorded(p, c, voters_flush, term), "split")
        time.sleep(SETTLE)
        polled = cluster.poll()
        phases[-1] |= {
            "records_reached_b_or_e": max(flush(polled, c.b), flush(polled, c.e)) > voters_flush,
            "tail_outlived": flush(polled, c.a) > max(flush(polled, c.c), flush(polled, c.d)),
            "flush": {n: flush(polled, n) for n in self.keepers(c)},
        }
        enter("apart")
        wait(cluster, lambda p: stood_down(p, c), "apart")
        enter("corrupt")
        polled = wait(cluster, lambda p: committed(p, c, term), "corrupt")
        phases[-1] |= {"committed_s": at() if polled else None}
        if polled:
            time.sleep(SETTLE)
        split = phases[1]
        # seed 003's shape: B and E voted without the records, A's tail outlived them, and
        # A, B and E then committed A's log
        reached = bool(polled) and not split["records_reached_b_or_e"] and split["tail_outlived"]
        return value | {"reached": reached, "took_s": at()}

    @staticmethod
    def keepers(c: Cast) -> list[str]:
        return [c.a, c.b, c.c, c.d, c.e]

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        healed = on_nodes(cluster.nodes, partition.heal)
        return self.plan() | {"healed": [name for name, had in healed.items() if had]}


def wait(cluster: ClusterKind, condition: Callable[[Poll], bool], phase: str) -> Poll | None:
    """Poll until `condition` holds (the poll that shows it), or None after the phase's wait."""
    deadline = time.monotonic() + WAITS[phase]
    while time.monotonic() < deadline:
        polled = cluster.poll()
        if condition(polled):
            return polled
        time.sleep(POLL_EVERY)
    log.info("seed003: the %s phase's condition did not hold within %.0f s", phase, WAITS[phase])
    return None
