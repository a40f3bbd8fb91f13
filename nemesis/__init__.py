"""Faults and their schedules, registered in one place: package name → where its faults come from.

The runner uses only `validate`, `interposes` and `interposed` (the proxies `toxic` acts on, put
in place before the first operation), `build` and `heal_nodes`; `harness cluster down` uses
`heal_nodes` too, so faults are undone even after a crash of the harness.

Packages (`--nemesis a,b,…`): `none`; `partition` (a random shape each time) and one package per
shape, `partition-majority`, `partition-ring` (majorities ring), `partition-primary`,
`partition-one`, `partition-halves`, `partition-bridge`; `partition-seed003` (seed 003's
history: partitions that move as the safekeeper cluster elects, so that a term's records reach
only some of its voters; two computes and three safekeepers or more) and `partition-seed001`
(seed 001's example: a term's voters include a longer log of an older term); `kill`, `pause`,
`clock`, `packet` on random targets (one, minority, majority, all or primaries), `kill-primary`,
`pause-primary`; `composite`, a partition (the leader's, half the time) with a kill or a pause
of random targets inside it; `partition-replication`, the leader cut off from the other members
only (it keeps its clients and its coordinators, its replicas fall behind), and
`replication-kill`, the leader killed inside that partition (neither is in `all`); `aimed`,
faults that bring about a moment of the protocol the cluster kind declares (a term won, a
takeover, a catch-up, …) and strike one of its roles when it comes (nemesis.aimed); and `all`,
every fault kind the cluster's node count allows, the partition, kill and pause of the leader as
packages of their own, `composite` and `aimed`. On a kind with a coordination service (ZooKeeper
for `manatee`, etcd for `patroni`): `partition-dcs` (the primary cut off from the coordinators
only: its session or its leader key expires while clients still reach it), `kill-dcs` and
`pause-dcs` (every coordinator at once); their older names `partition-zookeeper`,
`kill-zookeeper` and `pause-zookeeper` mean the same. On a kind an operator fails over
(`streaming`): `promote`, the primary fenced (stopped, or cut off from the other nodes) and the
standby that received the most WAL promoted, the deposed primary rewound into a standby at the
fault's end (nemesis.promote). On a kind whose manager switches over on request (`patroni`):
`switchover` (nemesis.switchover). On any kind, `toxic`: Toxiproxy's toxics on the clients'
connections or on a link the kind declares between its daemons (a compute's proxy to the
safekeepers, a standby to its primary, Patroni to etcd; nemesis.toxic). `all` has each where it
applies. See `nemesis.schedule` for the schedule and the history events.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from checkers.moments import Moment
from clusters.backend import Node
from clusters.kinds.base import (
    ClusterKind,
    ElectsByQuorum,
    KeepsUnpromotable,
    OperatorFailover,
    PlannedSwitchover,
    RestartsDeposed,
)
from core.endpoint import Endpoint
from core.errors import BadInput
from core.history import HistoryWriter
from nemesis import aimed, clock, packet, partition, toxic
from nemesis.aimed import MIN_NODES as AIMED_NODES
from nemesis.aimed import Aimed
from nemesis.aimed import scenarios as aimed_scenarios
from nemesis.base import Nemesis, NoNemesis
from nemesis.clock import Clock
from nemesis.fault import Fault, on_nodes
from nemesis.grudges import MIN_NODES_PRIMARIES, SHAPES
from nemesis.kill import Kill, KillProcess
from nemesis.packet import Packet
from nemesis.partition import PRIMARY_COORDINATORS, REPLICATION, WITH_UNPROMOTABLE, Partition
from nemesis.pause import Pause
from nemesis.power import Power
from nemesis.processes import continue_stopped
from nemesis.promote import Promote
from nemesis.restart_deposed import RestartDeposed
from nemesis.schedule import Nested, Package, ScheduledNemesis
from nemesis.seed001 import MIN_NODES as SEED001_NODES
from nemesis.seed001 import Seed001
from nemesis.seed003 import MIN_NODES as SEED003_NODES
from nemesis.seed003 import Seed003
from nemesis.switchover import Switchover
from nemesis.targets import COORDINATORS, TARGETS
from nemesis.toxic import ToxicFault

Make = Callable[[list[str], random.Random], Fault]


def _partition(shape: str) -> Make:
    return lambda nodes, rng: Partition.planned(shape, nodes, rng)


def _any_partition(nodes: list[str], rng: random.Random) -> Fault:
    """A shape drawn among those that are a partition on this many nodes."""
    shapes = [s for s, (_, least) in SHAPES.items() if least <= len(nodes)] + ["primaries"]
    return Partition.planned(rng.choice(shapes), nodes, rng)


def _targeted(cls: type[Kill | Pause | Clock | Packet | Power], target: str | None = None) -> Make:
    return lambda nodes, rng: cls.planned_for(target or rng.choice(TARGETS), nodes, rng)


def _composite(nodes: list[str], rng: random.Random) -> Nested:
    """A partition with a crash or a pause inside it: half the time the leader's partition, so
    that a fenced proxy's cluster restarts under it (seed 000's fencing, seed 001's recovery
    of WAL, exercised at once)."""
    outer = (
        _partition("primaries")(nodes, rng) if rng.random() < 0.5 else _any_partition(nodes, rng)
    )
    inner = _targeted(rng.choice((Kill, Pause)))(nodes, rng)
    return Nested(outer, inner)


def _replication_kill(nodes: list[str], rng: random.Random) -> Nested:
    """The leader cut off from its replicas, then killed inside that partition: whatever it
    acknowledged meanwhile is on no replica when one is promoted (asynchronous replication's
    loss in a failover; a synchronous cluster must instead stop acknowledging)."""
    return Nested(_partition(REPLICATION)(nodes, rng), _targeted(Kill, "primaries")(nodes, rng))


PACKAGES: dict[str, Package] = {
    p.name: p
    for p in (
        Package("partition", min(least for _, least in SHAPES.values()), _any_partition),
        Package("partition-majority", SHAPES["majority"][1], _partition("majority")),
        Package("partition-ring", SHAPES["majorities-ring"][1], _partition("majorities-ring")),
        Package("partition-primary", MIN_NODES_PRIMARIES, _partition("primaries")),
        Package("partition-one", SHAPES["one"][1], _partition("one")),
        Package("partition-halves", SHAPES["halves"][1], _partition("halves")),
        Package("partition-bridge", SHAPES["bridge"][1], _partition("bridge")),
        Package(
            "partition-seed003", SEED003_NODES, Seed003.planned, needs=ElectsByQuorum, in_all=False
        ),
        Package(
            "partition-seed001", SEED001_NODES, Seed001.planned, needs=ElectsByQuorum, in_all=False
        ),
        Package("kill", 1, _targeted(Kill)),
        Package("kill-primary", 1, _targeted(Kill, "primaries")),
        Package("pause", 1, _targeted(Pause)),
        Package("pause-primary", 1, _targeted(Pause, "primaries")),
        Package("clock", 1, _targeted(Clock)),
        Package("packet", 1, _targeted(Packet)),
        Package("power", 1, _targeted(Power)),
        Package("composite", MIN_NODES_PRIMARIES, _composite),
        Package("partition-replication", MIN_NODES_PRIMARIES, _partition(REPLICATION)),
        Package(
            "partition-unpromotable",
            MIN_NODES_PRIMARIES,
            _partition(WITH_UNPROMOTABLE),
            needs=KeepsUnpromotable,
        ),
        Package("replication-kill", MIN_NODES_PRIMARIES, _replication_kill),
        Package("aimed", AIMED_NODES, Aimed.planned, reads_kind=("moments", "power")),
        Package("partition-dcs", 2, _partition(PRIMARY_COORDINATORS), True),
        Package("kill-dcs", 1, _targeted(Kill, COORDINATORS), True),
        Package("pause-dcs", 1, _targeted(Pause, COORDINATORS), True),
        Package("promote", 2, Promote.planned, needs=OperatorFailover),
        Package("switchover", 2, Switchover.planned, needs=PlannedSwitchover),
        Package("restart-deposed", 2, RestartDeposed.planned, needs=RestartsDeposed),
        Package("toxic", 1, ToxicFault.planned, interposes=True, reads_kind=("links",)),
    )
}
ON_COORDINATORS = tuple(name for name, p in PACKAGES.items() if p.on_coordinators)
# The names the coordination service's faults had when only Manatee's ZooKeeper had them: still
# accepted, as the kind-neutral packages they now are.
ALIASES = {f"{fault}-zookeeper": f"{fault}-dcs" for fault in ("partition", "kill", "pause")}
# What only some kinds can have, each with the class a kind must be for it.
NEEDING = {name: p.needs for name, p in PACKAGES.items() if p.needs is not None}
NONE = "none"
ALL = "all"
# what `all` means: each fault kind, connection faults (`toxic`) among them
EVERY_KIND = ("partition", "kill", "pause", "clock", "packet", "power", "toxic")
# ... and, as packages of their own, the faults aimed at whoever leads when they start: drawn as
# one kind among many, a partition of the leader came once in 36 faults, yet deposing
# the leader is what a failover cluster must survive (Jepsen aims at primaries as often).
AT_THE_LEADER = ("partition-primary", "kill-primary", "pause-primary")
COMPOSITE = ("composite",)  # ... and faults inside faults, which no single kind makes
# ... and faults that strike at the protocol's moments (a vote, a takeover, a catch-up)
AIMED = "aimed"
POWER = "power"  # needs the backend's power layer under the nodes' state


LONE_KILL = "kill-"  # + a process the kind kills alone: `kill-postgres`, `kill-patroni`


def lone_kills(kind: type | None) -> dict[str, Package]:
    """The packages that kill one process of the kind alone, for the processes it declares so
    (`ClusterKind.lone_kills`): a package name → its package."""
    processes: tuple[str, ...] = getattr(kind, "lone_kills", ())
    return {
        f"{LONE_KILL}{p}": Package(f"{LONE_KILL}{p}", 1, functools.partial(_lone_kill, p))
        for p in processes
    }


def _lone_kill(process: str, nodes: list[str], rng: random.Random) -> Fault:
    return KillProcess.planned_as(process, rng)


def validate(
    names: list[str],
    node_count: int,
    cluster: str = "",
    coordinated: bool = False,
    kind: type | None = None,
) -> None:
    """Reject unknown packages, and faults the cluster cannot have, before anything starts
    (`kind`: the cluster kind's class, for the packages that need something of it)."""
    known = [NONE, ALL, *PACKAGES, *lone_kills(kind)]
    names = [ALIASES.get(name, name) for name in names]
    for name in names:
        if name not in known:
            raise BadInput(f"unknown nemesis {name!r}: choose from {', '.join(known)}")
        if name in ON_COORDINATORS and not coordinated:
            unless = " with these options" if kind is not None and kind.coordinated else ""
            raise BadInput(
                f"{name} needs a cluster with a coordination service (ZooKeeper, etcd, a "
                f"monitor or a witness); the {cluster or 'chosen'} cluster has none{unless}: "
                "choose another --nemesis"
            )
        needs = NEEDING.get(name)
        if needs is not None and not (kind and issubclass(kind, needs)):
            offers = getattr(needs, "offers", needs.__name__)
            raise BadInput(
                f"{name} needs {offers}; the {cluster or 'chosen'} cluster is not one: "
                "choose another --nemesis"
            )
    for name in names:
        least = PACKAGES[name].min_nodes if name in PACKAGES else 1
        if node_count < least:
            what = f"the {cluster} cluster" if cluster else "the cluster"
            raise BadInput(f"{name} needs at least {least} nodes; {what} has {node_count}")


def needs_power(names: list[str]) -> bool:
    """Whether these packages may cut a node's power (the backend must then lay its power layer
    under the nodes' state before they start)."""
    return POWER in names or ALL in names


def packages(
    names: list[str],
    node_count: int,
    power: bool = True,
    coordinated: bool = False,
    moments: tuple[type[Moment], ...] = (),
    kind: type | None = None,
    links: tuple[str, ...] = (),
) -> list[Package]:
    """The packages the names stand for, each once: `none` stands for none, `all` for every
    fault kind possible on this many nodes, the leader-aimed ones and the faults aimed at the
    kind's `moments` (power only where the backend offers it, and the coordination service's
    faults where the kind has one). The schedule draws among the list's entries alike, so in
    `all` a package that reads the kind (`aimed`) stands once for each of its scenarios (the
    kind's moments and the seeds' histories it can have): each is then drawn about as often
    as a fault kind, where one entry for them all left a 120 s run about one aimed fault, and
    a given moment almost none."""
    chosen: list[str] = []
    names = [ALIASES.get(name, name) for name in names]
    for name in names:
        if name == ALL:
            chosen += [
                k
                for k in (*EVERY_KIND, *AT_THE_LEADER, *COMPOSITE, AIMED)
                if PACKAGES[k].min_nodes <= node_count and (power or k != POWER)
            ]
            chosen += list(ON_COORDINATORS) if coordinated else []
            chosen += [
                n
                for n, needs in NEEDING.items()
                if kind and issubclass(kind, needs) and PACKAGES[n].in_all
            ]
            chosen += list(lone_kills(kind))
        elif name != NONE:
            chosen.append(name)
    known = PACKAGES | lone_kills(kind)
    entries = []
    for name in dict.fromkeys(chosen):
        is_aimed = "moments" in known[name].reads_kind
        draws = aimed_scenarios(node_count, moments) if is_aimed and ALL in names else 1
        facts = {"moments": moments, "power": power, "links": links}
        entries += [_bound(known[name], facts)] * draws
    return entries


def aimed_share(
    names: list[str],
    node_count: int,
    power: bool,
    coordinated: bool,
    moments: tuple[type[Moment], ...],
    kind: type | None = None,
) -> float:
    """The share of a schedule's faults that the aimed package draws, with these packages on
    this kind: how many chains a run of them meets."""
    entries = packages(names, node_count, power, coordinated, moments, kind=kind)
    return sum(p.name == AIMED for p in entries) / len(entries) if entries else 0.0


def _bound(package: Package, facts: dict[str, Any]) -> Package:
    """A package whose faults depend on the kind gets what they depend on (`reads_kind`) of
    the kind's `facts`: its moments, whether power can be cut, its internal links."""
    if not package.reads_kind:
        return package
    make = functools.partial(package.make, **{k: facts[k] for k in package.reads_kind})
    return dataclasses.replace(package, make=make, reads_kind=())


def chained(
    specs: Sequence[Mapping[str, Any]],
    moments: tuple[type[Moment], ...],
    node_count: int | None = None,
) -> Callable[[list[str], random.Random], Fault]:
    """Where the aimed package's faults come from when they are given (`--chains`): the
    chains in turn, round and round; a chain the kind (of `node_count` nodes, when known)
    cannot have is bad input now."""
    if not specs:
        raise BadInput("--chains names no chain: give a JSON list of chains")
    for spec in specs:
        aimed.of_spec(spec, moments, node_count)
    turn = itertools.cycle(specs)
    return lambda nodes, rng: aimed.of_spec(next(turn), moments)


def given_chains(
    chosen: list[Package],
    chains: Sequence[Mapping[str, Any]],
    moments: tuple[type[Moment], ...],
) -> list[Package]:
    """The packages with the aimed package's faults the `chains` in turn, wherever it is drawn
    (in `all`, each of its entries): the other packages' faults are drawn as ever."""
    make = chained(chains, moments)
    return [dataclasses.replace(p, make=make) if p.name == AIMED else p for p in chosen]


def build(
    names: list[str],
    cluster: ClusterKind,
    history: HistoryWriter,
    seed: int,
    interval: float,
    least: float = 0.0,
    chains: Sequence[Mapping[str, Any]] | None = None,
) -> Nemesis:
    """One nemesis that runs the named packages' faults on a shared schedule, every fault
    lasting `least` seconds at least; the aimed package's faults are `chains` in turn, where
    given."""
    kind = type(cluster)
    validate(names, cluster.node_count(), cluster.name, cluster.coordinated, kind)
    power = getattr(cluster.backend, "power", False)
    moments = cluster.moments_of(cluster.options)
    links = tuple(link.name for link in cluster.links)
    chosen = packages(
        names, cluster.node_count(), power, cluster.coordinated, moments, kind=kind, links=links
    )
    if chains:
        chosen = given_chains(chosen, chains, moments)
    if not chosen:
        return NoNemesis(cluster, history, seed, interval)
    return ScheduledNemesis(cluster, history, seed, interval, chosen, least)


def interposes(names: list[str]) -> bool:
    """Whether one of the packages acts on proxies between the clients and the nodes (the
    nodes must then publish the proxies' ports); `all` has `toxic`, which does."""
    chosen = [ALIASES.get(n, n) for n in names]
    return any(PACKAGES[n].interposes for n in chosen if n in PACKAGES) or ALL in chosen


def interposed(names: list[str], cluster: ClusterKind, endpoints: list[Endpoint]) -> list[Endpoint]:
    """The endpoints the clients use: through the proxies the chosen packages' faults act on,
    put in place now, where one of them needs them (`toxic`)."""
    return toxic.interpose(cluster, endpoints) if interposes(names) else endpoints


def heal_nodes(nodes: list[Node]) -> list[str]:
    """Undo every fault the harness can leave on these nodes, knowing nothing of what was done;
    returns what was undone ("n2: …"). A node that cannot be reached (it is down, say) is
    reported and skipped: whatever runs on it is not running. Killed processes are not restarted:
    `heal` does that during a run, and after a crash the cluster is being taken down."""

    def heal(node: Node) -> list[str]:
        done = []
        for step in (_heal_partition, packet.heal, clock.heal, toxic.heal, _continue_stopped):
            try:
                done += step(node)
            except Exception as e:
                done.append(f"could not heal: {e}")
        return done

    return [f"{name}: {what}" for name, done in on_nodes(nodes, heal).items() for what in done]


def _heal_partition(node: Node) -> list[str]:
    return ["removed the partition"] if partition.heal(node) else []


def _continue_stopped(node: Node) -> list[str]:
    paused = continue_stopped(node)
    return [f"continued stopped processes {paused}"] if paused else []
