"""What a cluster kind is: the software installed on a backend's nodes, and how to reach it."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

from checkers.cluster_state import Rule
from checkers.moments import Moment
from clusters import toxiproxy_server
from clusters.backend import Backend, Node, each
from clusters.kinds.links import Link, internal_address
from core.contract import Contract
from core.endpoint import Endpoint
from core.errors import BadInput
from core.polls import Record

if TYPE_CHECKING:  # the image module opens the engine's library: only the type is needed here
    from clusters.image import ImageSpec

CLUSTER_STATUS = "cluster-status.json"  # the status a run leaves in its node folder
# What a cluster is, on its first node: its kind and options, so that `harness cluster status`
# can read a cluster it did not start without being told again how it was made.
DECLARATION = "/var/lib/harness/cluster.json"


@dataclass(frozen=True)
class KindOption:
    """An option only one cluster kind takes (e.g. --safekeepers), with its checks: a kind's
    options are checked once, where the kind declares them, before any node starts."""

    name: str  # the keyword in the kind's options, e.g. "safekeepers"
    type: type
    help: str
    default: Any = None
    choices: tuple[str, ...] = ()
    # other accepted spellings of a choice (an old name), each mapped to the choice it means
    aliases: Mapping[str, str] = field(default_factory=dict)
    least: float | None = None  # a number must be at least this
    positive: bool = False  # a number must be above zero
    # What is wrong with a value, if anything, as the flag's sentence goes on ("must be 3 or 5").
    check: Callable[[Any], str | None] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def spellings(self) -> tuple[str, ...]:
        """What the command line accepts: the choices, and their other names."""
        return (*self.choices, *self.aliases)

    def value(self, given: Any) -> Any:
        """The option's value from what was given (None: not given), checked."""
        if given is None:
            return self.default
        if self.choices:
            given = self.aliases.get(given, given)
            if given not in self.choices:
                raise BadInput(
                    f"unknown {self.flag} {given!r}: choose from {', '.join(self.choices)}"
                )
        if self.type in (int, float) and (
            isinstance(given, bool) or not isinstance(given, (int, float))
        ):
            raise BadInput(f"{self.flag} takes a number, not {given!r}")
        if self.least is not None and given < self.least:
            raise BadInput(f"{self.flag} must be at least {self.least:g}, not {given!r}")
        if self.positive and given <= 0:
            raise BadInput(f"{self.flag} must be positive, not {given!r}")
        if self.check is not None and (problem := self.check(given)):
            raise BadInput(f"{self.flag} {problem}")
        return given


@dataclass(frozen=True)
class Process:
    """A process a kind runs on some of its nodes: the pattern `pgrep -f` finds it by (for the
    faults that kill or pause it) and how the kind starts it again on a node after a kill."""

    name: str
    pattern: str
    start: Callable[[Any, Node], None]  # the kind's method: (kind, node)


@dataclass(frozen=True)
class Install:
    """Files a kind copies onto every node before it starts anything (the systems under test):
    those of `source` matching `pattern`, into `dest`. Copied on every deploy, so a node's copy
    is never stale."""

    source: Path
    pattern: str
    dest: str


SYNCHRO_TIMEOUT_OPTION = KindOption(
    "synchro_timeout",
    float,
    "confirm-rollback: seconds a transaction waits for the quorum before the leader rolls it "
    "back (default 2).",
    default=2.0,
    positive=True,
)


class ClusterKind(ABC):
    """Installs, starts, inspects and tears down one kind of cluster on a backend's nodes.

    A kind declares what it is, and the harness reads the declarations: its options with their
    checks, the contract its histories are held to, whether it keeps real-time order, the
    processes it runs, the files it installs and collects, the records its poll gives, the
    cluster-state rules those are held to and the moments of its protocol they show."""

    name: ClassVar[str]
    about: ClassVar[str]  # what it is, in a few words, for `--cluster`'s help
    cli_options: ClassVar[tuple[KindOption, ...]] = ()
    # The contract the checkers hold its histories to (DESIGN.md); a kind whose contract is an
    # option says so in `contract_of`.
    contract: ClassVar[Contract] = Contract.DURABLE
    # Whether one primary serves every read and write, so that a read that begins after a
    # COMMIT returned sees it (one Postgres, or a failover cluster that keeps one primary): its
    # append histories are then held to the real-time variant of what the isolation promises.
    realtime_order: ClassVar[bool] = False
    # Whether some of its nodes serve a coordination service (ZooKeeper) rather than clients:
    # the faults aimed at that service (`--nemesis partition-zookeeper`, …) need them.
    coordinated: ClassVar[bool] = False
    installed: ClassVar[tuple[Install, ...]] = ()
    # Paths on every node copied into the run folder after a run (those a node lacks are
    # passed over), beside each node's own log.
    collected: ClassVar[tuple[str, ...]] = ()
    # Paths on a node of the logs its own daemons write (the reference systems of `systems/`,
    # in one of the `collected` folders): the logs checker reads them for exceptions.
    own_logs: ClassVar[tuple[str, ...]] = ()
    # The records its poll gives, and the rules of checkers.cluster_state they are held to.
    poll_records: ClassVar[tuple[type[Record], ...]] = ()
    state_rules: ClassVar[tuple[type[Rule], ...]] = ()
    # The moments of its protocol its polls can see (checkers/moments.py): the aimed nemesis
    # strikes at them, and every run's report says which were reached and struck.
    moments: ClassVar[tuple[type[Moment], ...]] = ()
    # The processes it runs, each with its starter (a method of the kind).
    runs: ClassVar[tuple[Process, ...]] = ()
    # Those of its processes a fault kills alone, the others on the node left running
    # (`--nemesis kill-NAME`, and in `all`): Patroni's and its Postgres's.
    lone_kills: ClassVar[tuple[str, ...]] = ()
    # The links between its daemons that a connection fault may act on (`--nemesis toxic`):
    # with the proxies in place, a daemon dials its peer through one on its own node (`dial`).
    links: ClassVar[tuple[Link, ...]] = ()

    def __init__(self, backend: Backend, cluster: str, options: Mapping[str, Any]) -> None:
        self.backend = backend
        self.cluster = cluster
        self.options = self.checked_options(options)
        self.ports: list[int] = []  # the ports its nodes serve on, once brought up

    @classmethod
    def checked_options(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every option of the kind with its value (the default where none was given), each
        checked; an option the kind does not take is the user's mistake."""
        own = {o.name: o for o in cls.cli_options}
        if unknown := [n for n, v in given.items() if v is not None and n not in own]:
            flag = "--" + unknown[0].replace("_", "-")
            raise BadInput(f"{flag} is not an option of --cluster {cls.name}")
        return {name: option.value(given.get(name)) for name, option in own.items()}

    @classmethod
    def recorded_options(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """The options a stored run recorded, as they are (they were checked when it ran), each
        option it did not record at its default."""
        defaults = {o.name: o.default for o in cls.cli_options}
        return defaults | {n: v for n, v in given.items() if v is not None}

    @classmethod
    def contract_of(cls, options: Mapping[str, Any]) -> Contract:
        """The contract a run with these (checked) options is held to."""
        return cls.contract

    @classmethod
    def isolation_refused(cls, options: Mapping[str, Any], isolation: str) -> str | None:
        """Why a run with these (checked) options cannot run transactions at `isolation`, as
        the sentence's end ("… cannot run serializable transactions"), or None."""
        return None

    @classmethod
    def realtime_order_of(cls, options: Mapping[str, Any]) -> bool:
        """Whether a run with these (checked) options keeps real-time order (`realtime_order`)."""
        return cls.realtime_order

    @classmethod
    def failover_s(cls, options: Mapping[str, Any]) -> float:
        """Seconds its manager takes to notice a lost leader and fail over, from its (checked)
        options (a key's TTL, a session's timeout, a lease): the timescale a fault must
        outlast to bring a failover about. 0: within the default fault's length."""
        return 0.0

    @classmethod
    def moments_of(cls, options: Mapping[str, Any]) -> tuple[type[Moment], ...]:
        """The moments a run with these (checked) options can reach."""
        return cls.moments

    @classmethod
    def own_logs_in_run(cls) -> tuple[str, ...]:
        """Where `own_logs` are in a node's folder of the run (`collect_files` copies each
        collected path there by its last name)."""
        found = []
        for log in cls.own_logs:
            for path in cls.collected:
                if log == path or log.startswith(path.rstrip("/") + "/"):
                    found.append(PurePosixPath(path).name + log[len(path.rstrip("/")) :])
                    break
            else:
                raise ValueError(f"{cls.name}: own log {log} is in no collected path")
        return tuple(found)

    @property
    def nodes(self) -> list[Node]:
        return self.backend.nodes(self.cluster)

    @classmethod
    @abstractmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        """How many nodes this kind needs with these (checked) options."""

    def node_count(self) -> int:
        return self.nodes_needed(self.options)

    @abstractmethod
    def deploy(self, say: Callable[[str], None]) -> None:
        """Bring the nodes up, install and start the software, wait until it answers."""

    @abstractmethod
    def endpoints(self) -> list[Endpoint]:
        """The endpoints clients connect to (one per node that serves clients)."""

    def processes(self) -> dict[str, str]:
        """Process name → command-line pattern, for faults that kill or pause them."""
        return {p.name: p.pattern for p in self.runs}

    def start_process(self, node: Node, name: str) -> None:
        """Start process `name` (one the kind runs) on `node` again, after a kill."""
        for process in self.runs:
            if process.name == name:
                process.start(self, node)
                return
        raise ValueError(f"the {self.name} cluster runs no process {name!r}")

    def bring_up(
        self,
        say: Callable[[str], None],
        ports: list[int],
        parts: str,
        image: ImageSpec | None = None,
    ) -> list[Node]:
        """The kind's nodes up on the backend (`parts` says which nodes are what), each with
        the declared files copied onto it."""
        count = self.node_count()
        say(f"starting {count} nodes on {self.backend.name}: {parts}")
        self.ports = list(ports)
        if self.backend.proxied:  # a connection-fault proxy may stand in front of any of them
            ports = toxiproxy_server.published(ports)
        nodes = self.backend.up(self.cluster, count, ports, image)
        said = {"kind": self.name, "options": dict(self.options)}
        nodes[0].put_file(DECLARATION, json.dumps(said, sort_keys=True).encode())
        for item in self.installed:
            files = {
                path.name: path.read_bytes() for path in sorted(item.source.glob(item.pattern))
            }
            for node in nodes:
                node.put_files(item.dest, files)
        return nodes

    def dial(self, node: Node, link: Link, peer: str, port: int) -> tuple[str, int]:
        """Where a daemon on `node` reaches `peer:port` over `link`: the peer itself, or, in a
        run that puts connection-fault proxies in place, a proxy of that link on its own node."""
        if self.backend.proxied:
            return internal_address(node, link.name, peer, port)
        return peer, port

    @staticmethod
    def declared(nodes: list[Node]) -> tuple[str, dict[str, Any]] | None:
        """The kind and options a cluster's nodes were brought up with; None for a cluster
        whose first node does not say (one made before nodes said it)."""
        first = next((n for n in nodes if n.name == "n1"), None)
        if first is None:
            return None
        said = first.exec(f"cat {DECLARATION}", check=False)
        try:
            value = json.loads(said.output) if said.code == 0 else None
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
            return None
        return value["kind"], dict(value.get("options") or {})

    @abstractmethod
    def leader(self) -> str | None:
        """The node that currently leads (takes writes), if the kind can tell."""

    @classmethod
    def coordinated_with(cls, options: Mapping[str, Any]) -> bool:
        """Whether a cluster of this kind with these (checked) options has a coordination
        service to strike: `coordinated`, unless an option leaves it out."""
        return cls.coordinated

    def coordinators(self) -> list[str]:
        """The nodes that serve the coordination service (none unless `coordinated`)."""
        return []

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """What an operator would look at: per node, is it up, its role and positions."""

    def poll(self) -> dict[str, Record]:
        """What each node says of itself now (one of the kind's `poll_records`), cheaply enough
        to ask about once a second during a run (who serves, in which term; terms and LSNs): the
        harness records it beside the history and the cluster-state rules hold it to the kind's
        promises. A node that does not answer is left out; {} for a kind with nothing to say."""
        return {}

    def final_state(self) -> dict[str, Any]:
        """What the kind records of the whole cluster once a run is over, by file name in the
        run's node folder: the status an operator would see, and what a kind adds."""
        return {CLUSTER_STATUS: self.status()}

    def collect(self, dest: Path) -> None:
        """Copy every node's log and declared files into `dest/<node>/`, and the final state."""
        self.collect_files(dest)
        for name, state in self.final_state().items():
            (dest / name).write_text(json.dumps(state, indent=2))

    def collect_files(self, dest: Path) -> None:
        """Copy every node's log and declared files into `dest/<node>/` (what a cluster that
        did not come up leaves to read too)."""

        def collect_one(node: Node) -> None:
            target = dest / node.name
            target.mkdir(parents=True, exist_ok=True)
            for path in self.collected:
                node.get(path, target)
            (target / "container.log").write_text(node.logs())

        each(collect_one, self.nodes)  # the nodes side by side: each copy is a wait on its node

    def teardown(self) -> list[str]:
        return self.backend.down(self.cluster)


class OperatorFailover(ABC):
    """A kind that does not fail over by itself: an operator's script does (plain streaming
    replication), and the `promote` fault plays the operator. The fault decides when and how
    the primary is fenced; the kind knows how its servers are stopped, promoted and re-pointed."""

    # what a fault that needs it asks of the cluster, as "needs …" goes on
    offers: ClassVar[str] = (
        "an operator's failover, for a cluster that does not fail over by itself "
        "(--cluster streaming)"
    )

    @abstractmethod
    def fence(self, node: Node) -> str:
        """Stop the node's server at once, as a STONITH would; what was done."""

    @abstractmethod
    def promote_most_advanced(self, deposed: str) -> dict[str, Any]:
        """Promote the standby that received the most WAL, other than `deposed`, and point the
        others at it: what was done (the positions each reported, who was promoted and who
        follows it); no one is promoted when no standby answers."""

    @abstractmethod
    def rejoin(self, node: Node) -> dict[str, Any]:
        """Bring a deposed primary back as a standby of the one that takes writes now (rewound,
        or a new base backup when it cannot be): what was done."""


class PlannedSwitchover(ABC):
    """A kind whose manager hands the primary to another node on request (Patroni's
    switchover): the `switchover` fault asks for one, as an operator's maintenance does."""

    offers: ClassVar[str] = (
        "a manager that switches the primary over on request (--cluster patroni)"
    )

    @abstractmethod
    def switchover(self) -> dict[str, Any]:
        """Ask for the primary to be handed to another node now, and wait for the answer: who
        led, what the manager answered, who leads after."""


class RestartsDeposed(ABC):
    """A kind whose manager fails over without fencing the old primary (repmgr): it leaves to
    the operator what becomes of it, and an operator or an init system that starts a crashed
    server again starts it as it was, a primary beside the promoted one. The
    `restart-deposed` fault plays that: the kind knows how its Postgres crashes, starts on its
    data directory unchanged, and rejoins as the manual says."""

    offers: ClassVar[str] = (
        "a manager that fails over without fencing the old primary (--cluster repmgr)"
    )

    @abstractmethod
    def crash_postgres(self, node: Node) -> str:
        """Stop the node's Postgres at once, as a crash does: what was done."""

    @abstractmethod
    def start_as_it_was(self, node: Node) -> str:
        """Start the node's Postgres on its data directory unchanged (no rejoin, no rewind), as
        an init system does: what was done."""

    @abstractmethod
    def rejoin_deposed(self, node: Node) -> dict[str, Any]:
        """Bring a deposed primary back as a standby of the one that takes writes now, as the
        manager's manual says (stopped first if it runs): what was done."""


class KeepsUnpromotable(ABC):
    """A kind whose members may include standbys that stream from the primary but are never
    promoted or never counted for a commit (pg_auto_failover's candidate priority 0 and
    replication quorum false): the primary may still see them while it has lost every one that
    counts, which its own check for a partition reads as connected."""

    offers: ClassVar[str] = (
        "members that are never promoted or never counted for a commit (--cluster autofailover)"
    )

    @abstractmethod
    def unpromotable(self) -> list[str]:
        """The members that are never promoted or never counted for a commit."""


class ElectsByQuorum:
    """A kind whose computes win terms from a quorum of safekeepers and whose polls report each
    node's term, log and role: the seeds' histories (nemesis.seed001, nemesis.seed003) place
    their partitions by what those polls say of an election."""

    offers: ClassVar[str] = (
        "computes elected by a quorum of safekeepers, as seeds 001 and 003 describe "
        "(--cluster safekeeper)"
    )


class SwitchesWal(ABC):
    """A kind whose Postgres can be made to start a new WAL segment on request, as
    `archive_timeout` or the end of a base backup makes it: the segment's unused rest is
    shipped as WAL, so a fault can give one node's log a long tail at a moment it chooses
    (nemesis.seed001)."""

    offers: ClassVar[str] = "a Postgres whose WAL segment can be switched (--cluster safekeeper)"

    @abstractmethod
    def switch_wal(self, node: str) -> str:
        """Have the named node's Postgres switch to a new WAL segment now: what it answered (the
        LSN the switch ended at), or why it could not."""
