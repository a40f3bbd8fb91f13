"""Cluster kind `patroni`: `--members N` Postgres 15 nodes n1…nN (3 by default), each run by
Patroni, and an etcd ensemble of three (Debian's 3.4) on nodes of their own after them, as most
users run Postgres for high availability. Patroni keeps the leader key in etcd, promotes a
replica when the key expires, rewinds a deposed primary, and with `--patroni-sync on` or
`quorum` keeps synchronous standbys (`synchronous_mode` and `synchronous_mode_strict`: no commit
is acknowledged without one; with quorum, any of them may be promoted).

Patroni is 4.1 from PyPI on Debian's packages of its dependencies: Debian's 3.0.2 has no
`synchronous_mode: quorum`, the mode the Patroni project's own Jepsen test runs, and would read it
as off without a word. The configuration follows that test: `failsafe_mode`, `check_timeline`,
`use_pg_rewind`, replication slots, the watchdog off (there is none in a container).

The harness sees the cluster as an operator does: each member's REST API (Patroni's role and
state), each member's Postgres (recovery, timeline, WAL positions, as for `streaming`) and the
leader key in etcd (through etcd's JSON gateway). The nodes use an image of their own, built on
the kind's first use. etcd keeps its data off the power layer (see ETCD_DATA).
"""

from __future__ import annotations

import base64
import contextlib
import json
import zipfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from checkers.cluster_state import (
    DeposedAcknowledged,
    LeaderKeyHeld,
    QuietElections,
    Timelines,
)
from checkers.moments import KeyTaken, Rejoining, StandbyBehind
from clusters.backend import Node
from clusters.image import PATRONI_IMAGE, PATRONI_WHEEL, fetch_wheel
from clusters.kinds import postgres as pg
from clusters.kinds.base import ClusterKind, KindOption, PlannedSwitchover, Process
from clusters.kinds.links import Link
from clusters.kinds.on_node import (
    ensure_clock_file,
    start_once,
    wait_until,
)
from clusters.kinds.streaming import READ_FROM_OPTION, StandbyReads, node_state, reading_endpoints
from core.endpoint import Endpoint
from core.polls import COORDINATION, LeaderKeyPoll, PatroniPoll, Record, lsn_text

DEFAULT_MEMBERS = 3
ETCD_SERVERS = 3
REST_PORT = 8008
ETCD_PORT = 2379
ETCD_PEER_PORT = 2380
SCOPE = "harness"
KEYS = f"/service/{SCOPE}"  # where Patroni keeps the cluster's keys in etcd
STATE_DIR = "/var/lib/harness"
CONFIG = f"{STATE_DIR}/patroni.yml"
# Off the power layer (which holds STATE_DIR, with direct I/O): etcd's bbolt maps its file
# shared, which a FUSE file opened for direct I/O refuses, and etcd then never starts. A power
# fault on an etcd node is therefore a crash of etcd, which fsyncs all it acknowledges.
ETCD_DATA = "/var/lib/etcd-harness"
# Patroni starts Postgres from bin_dir: a folder of links to Debian's binaries in which
# `postgres` runs under the node's faked clock, so that a clock fault moves Postgres's clock
# and not Patroni's (whose loop the clock fault is not meant to test through libfaketime).
BIN_DIR = f"{STATE_DIR}/bin"
SYNC_CHOICES = ("off", "on", "quorum")
PATRONI = "/usr/local/bin/patroni"  # the wheel's, installed by pip in the image
DEFAULT_TTL = 30  # Patroni's: the leader key lives this long without its holder renewing it
ASK_TIMEOUT = 2.0  # seconds the harness waits for one REST or etcd answer
SWITCHOVER_WAIT_S = 60  # Patroni answers a switchover once it is done (or failed)
DEPLOY_WAIT_S = 180  # Patroni bootstraps the first member with initdb, the rest by basebackup
# the link a connection fault may act on besides the clients': each member's Patroni to each
# etcd server (the leader key's renewals and watches)
TO_ETCD = Link("etcd", "each member's Patroni to each etcd server")


def loop_of(ttl: int) -> tuple[int, int]:
    """loop_wait and retry_timeout for a TTL, in Patroni's default proportions (30: 10, 10),
    so that loop_wait + 2 * retry_timeout <= ttl, which Patroni needs and does not enforce."""
    part = max(1, ttl // 3)
    return part, part


def patroni_config(
    member: str, etcd: list[str], sync: str, ttl: int, *, through_proxies: bool = False
) -> str:
    """Patroni's YAML for one member (JSON is YAML: written with no YAML library). `etcd`: the
    addresses (host:port) it reaches etcd at; `through_proxies`: those are proxies, which
    Patroni must keep to rather than ask etcd for its members' own addresses."""
    loop_wait, retry_timeout = loop_of(ttl)
    hba = ["local all all trust", "host all all 0.0.0.0/0 trust",
           "host replication all 0.0.0.0/0 trust"]  # fmt: skip
    config = {
        "scope": SCOPE,
        "name": member,
        "restapi": {"listen": f"0.0.0.0:{REST_PORT}", "connect_address": f"{member}:{REST_PORT}"},
        "etcd3": {"hosts": etcd} | ({"use_proxies": True} if through_proxies else {}),
        "bootstrap": {
            "dcs": {
                "ttl": ttl,
                "loop_wait": loop_wait,
                "retry_timeout": retry_timeout,
                "maximum_lag_on_failover": 1 << 20,
                "synchronous_mode": "quorum" if sync == "quorum" else sync == "on",
                "synchronous_mode_strict": sync != "off",
                "check_timeline": True,
                "failsafe_mode": True,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "max_connections": 300,
                        "wal_log_hints": "on",
                        "hot_standby": "on",
                        "max_wal_senders": 16,
                        "max_replication_slots": 16,
                        "wal_keep_size": "512MB",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}],
            "pg_hba": hba,
        },
        "postgresql": {
            "listen": f"0.0.0.0:{pg.PORT}",
            "connect_address": f"{member}:{pg.PORT}",
            "data_dir": pg.PGDATA,
            "bin_dir": BIN_DIR,
            "pgpass": f"{STATE_DIR}/pgpass",
            "authentication": {
                "superuser": {"username": pg.USER, "password": "harness"},
                "replication": {"username": pg.USER, "password": "harness"},
                "rewind": {"username": pg.USER, "password": "harness"},
            },
            "parameters": {
                "unix_socket_directories": "/var/run/postgresql",
                "logging_collector": "on",
                "log_directory": pg.LOG_DIR,
                "log_filename": "postgres.log",
                "log_line_prefix": "%m [%p] %q%u@%d ",
                "log_min_messages": "warning",
            },
            "pg_hba": hba,
        },
        "watchdog": {"mode": "off"},
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
    }
    return json.dumps(config, indent=2) + "\n"


def patch_modules(folder: str) -> list[Path]:
    """The modules of a `--patroni-patch` folder, relative to it."""
    root = Path(folder)
    return sorted(p.relative_to(root) for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def patch_problem(folder: str) -> str | None:
    """What is wrong with a `--patroni-patch` folder: each module in it must stand for one of
    the pinned Patroni's, so that a typo is refused before a cluster starts rather than copied
    beside the package, unread."""
    if not Path(folder).is_dir():
        return f"must be a folder of Patroni's modules; {folder} is not a folder"
    modules = patch_modules(folder)
    if not modules:
        return f"names {folder}, which holds no .py file: put the changed modules of Patroni there"
    with zipfile.ZipFile(fetch_wheel(PATRONI_WHEEL)) as wheel:
        known = {name.removeprefix("patroni/") for name in wheel.namelist()}
    unknown = [str(m) for m in modules if str(m) not in known]
    if unknown:
        return (
            f"holds {', '.join(unknown)}, which {PATRONI_WHEEL.requirement} has no module of: "
            "lay the folder out as the patroni package is (ha.py, dcs/etcd3.py, …)"
        )
    return None


def same_minor(a: str, b: str) -> bool:
    """Whether two versions agree in major and minor ("3.4.0", "3.4.23")."""
    return a.split(".")[:2] == b.split(".")[:2]


def etcd_command(me: str, etcd: list[str]) -> str:
    cluster = ",".join(f"{e}=http://{e}:{ETCD_PEER_PORT}" for e in etcd)
    return (
        f"/usr/bin/etcd --name {me} --data-dir {ETCD_DATA} "
        f"--listen-peer-urls http://0.0.0.0:{ETCD_PEER_PORT} "
        f"--listen-client-urls http://0.0.0.0:{ETCD_PORT} "
        f"--initial-advertise-peer-urls http://{me}:{ETCD_PEER_PORT} "
        f"--advertise-client-urls http://{me}:{ETCD_PORT} "
        f"--initial-cluster {cluster} --initial-cluster-state new "
        f"--initial-cluster-token {SCOPE}"
    )


class PatroniCluster(StandbyReads, ClusterKind, PlannedSwitchover):
    name = "patroni"
    about = (
        "Postgres under Patroni 4.1 with an etcd ensemble, as most users run it; its nodes' "
        "image is built on first use"
    )
    coordinated = True
    cli_options = (
        KindOption(
            "members",
            int,
            f"Number of Postgres members under Patroni (default {DEFAULT_MEMBERS}); "
            f"{ETCD_SERVERS} etcd servers run on nodes after them.",
            default=DEFAULT_MEMBERS,
            least=2,
        ),
        KindOption(
            "patroni_sync",
            str,
            "off (default, Patroni's: replicas stream asynchronously; a failover may lose "
            "acknowledged commits, up to maximum_lag_on_failover), on (synchronous_mode and "
            "synchronous_mode_strict: a commit waits for the synchronous standby, the only "
            "replica that may be promoted) or quorum (synchronous_mode: quorum, strict: a commit "
            "waits for any one replica, ANY 1 (…); a replica is promoted only with a quorum of "
            "the members' say, as the Patroni project's Jepsen test runs it).",
            default=SYNC_CHOICES[0],
            choices=SYNC_CHOICES,
        ),
        KindOption(
            "ttl",
            int,
            f"Seconds the leader key lives without renewal (default {DEFAULT_TTL}, Patroni's); "
            "loop_wait and retry_timeout are a third of it each, as in Patroni's defaults.",
            default=DEFAULT_TTL,
            least=3,
        ),
        READ_FROM_OPTION,
        KindOption(
            "patroni_patch",
            str,
            "A folder of Patroni's modules laid out as its package is (ha.py, dcs/etcd3.py, …): "
            f"each replaces {PATRONI_WHEEL.requirement}'s own on every member before Patroni "
            "starts, to put a change of Patroni through the harness (default: none).",
            check=patch_problem,
        ),
    )
    collected = (pg.LOG_DIR, CONFIG)
    poll_records = (PatroniPoll, LeaderKeyPoll)
    state_rules = (DeposedAcknowledged, LeaderKeyHeld, Timelines, QuietElections)
    moments = (KeyTaken, Rejoining, StandbyBehind)

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["members"]) + ETCD_SERVERS

    @classmethod
    def failover_s(cls, options: Mapping[str, Any]) -> float:
        """The leader key's TTL, then a loop before a replica takes it."""
        ttl = int(options["ttl"])
        return float(ttl + loop_of(ttl)[0])

    def members(self) -> list[Node]:
        return self.nodes[: self.options["members"]]

    def etcds(self) -> list[Node]:
        return self.nodes[self.options["members"] :]

    def coordinators(self) -> list[str]:
        return [n.name for n in self.etcds()]

    # deploying

    def deploy(self, say: Callable[[str], None]) -> None:
        """etcd first; then n1's Patroni, which bootstraps the cluster (initdb) and takes the
        leader key; then the others, which Patroni makes replicas by base backup; the database
        last: under strict synchronous mode no commit returns before a replica streams."""
        members = self.options["members"]
        parts = (
            f"n1…n{members} Postgres under Patroni, n{members + 1}…n{self.node_count()} etcd "
            f"(image {PATRONI_IMAGE.name}, built on first use)"
        )
        self.bring_up(say, [pg.PORT, REST_PORT, ETCD_PORT], parts, PATRONI_IMAGE)
        if self.options.get("patroni_patch"):
            self.patch(say, self.options["patroni_patch"])
        say(f"starting the etcd ensemble on {', '.join(self.coordinators())}")
        for node in self.etcds():
            self.start_etcd(node)
        wait_until("an etcd quorum at its servers' version", self._etcd_healthy, 120)
        first, *others = self.members()
        say(f"starting Patroni on n1 (sync {self.options['patroni_sync']}, ttl {self.ttl} s)")
        self.start_patroni(first)
        wait_until(
            "n1 bootstrapped and holding the leader key",
            lambda: self.leader_key() == first.name and _writable(first),
            DEPLOY_WAIT_S,
        )
        say(f"starting Patroni on {', '.join(n.name for n in others)}: replicas by base backup")
        for node in others:
            self.start_patroni(node)
        wait_until(
            f"{len(others)} replicas streaming",
            lambda: all(
                (s := self.rest(n)).get("state") == "running" and s.get("role") == "replica"
                for n in others
            ),
            DEPLOY_WAIT_S,
        )
        if self.options["patroni_sync"] != "off":
            # strict mode blocks every commit until Patroni names a synchronous standby
            wait_until("Patroni naming a synchronous standby", self.sync_standby, 60)
        pg.ensure_database(first)

    def patch(self, say: Callable[[str], None], folder: str) -> None:
        """The folder's modules in place of the installed ones, on every member; their compiled
        copies go, so that Python cannot run the module it replaced."""
        modules = patch_modules(folder)
        say(f"replacing Patroni's {', '.join(map(str, modules))} with those of {folder}")
        for node in self.members():
            package = node.exec(
                "python3 -c 'import os, patroni; print(os.path.dirname(patroni.__file__))'"
            ).output.strip()
            for module in modules:
                target = Path(package) / module
                node.put_file(str(target), (Path(folder) / module).read_bytes())
                node.exec(f"rm -f {target.parent}/__pycache__/{target.stem}.*.pyc")

    @property
    def ttl(self) -> int:
        return int(self.options["ttl"])

    def start_etcd(self, node: Node) -> None:
        node.exec(f"mkdir -p {ETCD_DATA} {pg.LOG_DIR}")
        cmd = etcd_command(node.name, self.coordinators())
        start_once(node, "[b]in/etcd ", cmd, f"{pg.LOG_DIR}/etcd.log")

    def start_patroni(self, node: Node) -> None:
        """The member's Patroni, unless it runs: it starts Postgres in the role the leader
        key gives it."""
        ensure_clock_file(node)
        pg.make_dirs(node)
        etcd = [self.dial(node, TO_ETCD, e, ETCD_PORT) for e in self.coordinators()]
        config = patroni_config(
            node.name,
            [f"{host}:{port}" for host, port in etcd],
            self.options["patroni_sync"],
            self.ttl,
            through_proxies=self.backend.proxied,
        )
        node.put_file(CONFIG, config.encode(), owner="postgres")
        node.exec("mkdir -p /var/run/postgresql && chown postgres:postgres /var/run/postgresql")
        pg.faked_clock_bin(node, BIN_DIR)
        cmd = f"runuser -u postgres -- {PATRONI} {CONFIG}"
        start_once(node, f"[p]atroni {CONFIG}", cmd, f"{pg.LOG_DIR}/patroni.log")

    lone_kills = ("postgres", "patroni")
    links = (TO_ETCD,)
    runs = (
        Process("patroni", f"patroni {CONFIG}", start_patroni),
        Process("postgres", f"{pg.PG_BIN}/postgres", start_patroni),
        Process("etcd", "bin/etcd ", start_etcd),
    )

    # a planned switchover (the `switchover` fault)

    def switchover(self) -> dict[str, Any]:
        """As `patronictl switchover --force` does: ask the leader's REST API to hand over to
        whichever member Patroni picks (in sync mode, the synchronous standby), and wait for
        its answer, which comes once the new leader runs or the switchover failed."""
        old = self.leader_key()
        done: dict[str, Any] = {"leader": old}
        node = next((n for n in self.members() if n.name == old), None)
        if node is None:
            return done | {"answer": "no member holds the leader key: nothing to switch over"}
        host, port = node.endpoint(REST_PORT)
        try:
            reply = requests.post(
                f"http://{host}:{port}/switchover",
                json={"leader": old},
                timeout=SWITCHOVER_WAIT_S,
            )
            done |= {"status": reply.status_code, "answer": reply.text.strip()[:200]}
        except requests.RequestException as e:
            done |= {"answer": f"no answer: {e}"[:200]}
        return done | {"new_leader": self.leader_key()}

    # what clients see

    def endpoints(self) -> list[Endpoint]:
        return reading_endpoints(self.members(), self.options["read_from"])

    # reading the cluster's state

    def rest(self, node: Node) -> dict[str, Any]:
        """The member's own account through Patroni's REST API (`/patroni`); {} when it does
        not answer."""
        host, port = node.endpoint(REST_PORT)
        with contextlib.suppress(requests.RequestException, ValueError):
            reply = requests.get(f"http://{host}:{port}/patroni", timeout=ASK_TIMEOUT)
            state = reply.json()
            return state if isinstance(state, dict) else {}
        return {}

    def _etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """One request to any etcd server's JSON gateway; None when none answers."""
        for node in self.etcds():
            host, port = node.endpoint(ETCD_PORT)
            with contextlib.suppress(requests.RequestException, ValueError):
                reply = requests.post(f"http://{host}:{port}{path}", json=body, timeout=ASK_TIMEOUT)
                if reply.ok:
                    answer = reply.json()
                    return answer if isinstance(answer, dict) else None
        return None

    def _key(self, path: str) -> str | None:
        """The value of one key of the cluster's in etcd; None when it does not exist or etcd
        does not answer."""
        key = base64.b64encode(f"{KEYS}/{path}".encode()).decode()
        answer = self._etcd("/v3/kv/range", {"key": key})
        kvs = (answer or {}).get("kvs") or []
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def leader_key(self) -> str | None:
        """The member whose name the leader key holds, as etcd says; None when no key exists
        or etcd does not answer."""
        return self._key("leader")

    def sync_standby(self) -> str | None:
        """The replicas Patroni's sync key names, comma-separated (a switchover in synchronous
        mode goes to one of them); None while it names none."""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            return json.loads(self._key("sync") or "{}").get("sync_standby") or None
        return None

    def _etcd_healthy(self) -> bool:
        """A quorum, and the ensemble's cluster version raised to its servers' own. A new
        etcd 3.4 ensemble reports cluster version 3.0 for its first seconds; a Patroni that
        asks then takes the /v3alpha API, which 3.4 does not serve, and fails every request;
        behind proxies (use_proxies) it never asks again, until restarted (FINDINGS.md)."""
        host, port = self.etcds()[0].endpoint(ETCD_PORT)
        reply = requests.get(f"http://{host}:{port}/health", timeout=ASK_TIMEOUT)
        if not (reply.ok and str(reply.json().get("health")) == "true"):
            return False
        version = requests.get(f"http://{host}:{port}/version", timeout=ASK_TIMEOUT).json()
        return same_minor(version["etcdcluster"], version["etcdserver"])

    def member_state(self, node: Node) -> PatroniPoll | None:
        """The member's Postgres as the `streaming` kind polls it, with Patroni's role and
        state; None when neither answers."""
        own = node_state(node)
        said = self.rest(node)
        if own is None and not said:
            return None
        fields = {f: getattr(own, f) for f in own.__struct_fields__} if own else {}
        return PatroniPoll(**fields, role=said.get("role"), state=said.get("state"))

    def poll(self) -> dict[str, Record]:
        """Each member's Postgres and Patroni, and who holds the leader key."""
        members = self.members()
        with ThreadPoolExecutor(len(members) + 1) as pool:
            holder = pool.submit(self.leader_key)
            states = list(pool.map(self.member_state, members))
            key = holder.result()
        polled: dict[str, Record] = {
            n.name: s for n, s in zip(members, states, strict=True) if s is not None
        }
        polled[COORDINATION] = LeaderKeyPoll(key, self.ttl)
        return polled

    def leader(self) -> str | None:
        """The member the leader key names, as Patroni decides who leads; where etcd does not
        answer, the member whose Postgres takes writes."""
        key = self.leader_key()
        if key is not None:
            return key
        return next((n.name for n in self.members() if _writable(n)), None)

    def status(self) -> dict[str, Any]:
        polled = self.poll()
        nodes: dict[str, dict[str, Any]] = {}
        for node in self.members():
            s = polled.get(node.name)
            if not isinstance(s, PatroniPoll):
                nodes[node.name] = {"role": "unknown", "postgres": "not answering"}
                continue
            nodes[node.name] = {
                "role": s.role or "patroni not answering",
                "state": s.state,
                "postgres": "read-write" if s.writable else "read-only",
                "timeline": s.timeline,
                "lsn": None if s.lsn is None else lsn_text(s.lsn),
            }
        for node in self.etcds():
            nodes[node.name] = {"role": "etcd"}
        key = polled.get(COORDINATION)
        return {
            "kind": self.name,
            "leader": key.holder if isinstance(key, LeaderKeyPoll) else None,
            "patroni_sync": self.options["patroni_sync"],
            "sync_standby": self.sync_standby(),
            "ttl": self.ttl,
            "read_from": self.options["read_from"],
            "nodes": nodes,
        }


def _writable(node: Node) -> bool:
    state = node_state(node)
    return bool(state and state.writable)
