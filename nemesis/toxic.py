"""The toxic fault: Toxiproxy's connection faults on the links between the clients and the nodes,
and on the links a cluster kind declares between its daemons.

With `toxic` among the packages, the run puts a proxy (clusters/toxiproxy_server) in front of
every port the clients reach, on the node that serves it, before the first operation
(`interpose`): the workers then connect through it. A kind's internal links go through proxies
too, which the kind puts in place as it starts its daemons (clusters/kinds/links.py). A fault
draws, from the seed, a link (the clients' or one of the kind's), one toxic and one stream
(upstream: from the side that dials to the side dialled; downstream: back), adds that toxic to
every proxy of that link on its target nodes, and removes it at its end. Its history values
name the toxic, its attributes, the stream and the link.

The toxics (noxious's, with the amounts the schedule gives them): latency (200 ms ± 50),
bandwidth (32 KB/s), slow_close (the close held 2 s), timeout (data stops, the connection is
closed after 3 s), slicer (the data cut in pieces of 64 ± 32 bytes, 500 µs apart), limit_data
(the connection cut after 64 KiB), reset_peer (each connection reset after 1 s; written in the
server, as noxious has none).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Any

import requests
from toxiproxy import Toxiproxy

from clusters import toxiproxy_server as tp
from clusters.backend import Node
from clusters.kinds.base import ClusterKind
from clusters.kinds.links import CLIENT, of_link, start_on
from core.endpoint import Endpoint
from core.errors import BadInput, InfraError
from nemesis import targets
from nemesis.fault import Fault, Replaying, by_name, on_nodes, planned_nodes

TOXICS: dict[str, dict[str, int]] = {
    "latency": {"latency": 200, "jitter": 50},
    "bandwidth": {"rate": 32},
    "slow_close": {"delay": 2000},
    "timeout": {"timeout": 3000},
    "slicer": {"average_size": 64, "size_variation": 32, "delay": 500},
    "limit_data": {"bytes": 64 * 1024},
    "reset_peer": {"timeout": 1000},
}
STREAMS = ("upstream", "downstream")
TOXIC_NAME = "harness"  # the one toxic a fault adds to each proxy


class ToxicFault(Fault):
    name = "toxic"

    def __init__(
        self,
        target: str,
        planned: list[str] | None,
        toxic: str,
        stream: str,
        attributes: dict[str, int],
        link: str = CLIENT,
    ) -> None:
        self.target = target
        self.planned = planned
        self.toxic = toxic
        self.stream = stream
        self.attributes = attributes
        self.link = link
        self.touched: list[str] = []

    @classmethod
    def planned(
        cls, nodes: list[str], rng: random.Random, links: tuple[str, ...] = ()
    ) -> ToxicFault:
        """A toxic on random targets, on the clients' link or one of the kind's `links`."""
        target = rng.choice(targets.TARGETS)
        link = rng.choice((CLIENT, *links))
        toxic = rng.choice(sorted(TOXICS))
        stream = rng.choice(STREAMS)
        planned = targets.pick(target, nodes, rng)
        return cls(target, planned, toxic, stream, dict(TOXICS[toxic]), link)

    def plan(self) -> dict[str, Any]:
        return {
            "fault": self.name,
            "target": self.target,
            "targets": self.planned,
            "toxic": self.toxic,
            "stream": self.stream,
            "attributes": self.attributes,
            "link": self.link,
        }

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        if plan["toxic"] not in TOXICS:
            raise BadInput(f"the schedule's toxic fault names no toxic {plan['toxic']!r}")
        attributes = {str(k): int(v) for k, v in plan["attributes"].items()}
        return cls(plan["target"], planned_nodes(plan), plan["toxic"], plan["stream"],
                   attributes, plan.get("link", CLIENT))  # fmt: skip

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        names = targets.resolve(cluster, self.target, self.planned)
        self.touched = names
        spec = {"type": self.toxic, "stream": self.stream, "attributes": self.attributes}

        def add(node: Node) -> list[str]:
            """The toxic on each proxy of the link on the node; none where the link does not
            pass (a safekeeper serves no client and dials no one: it runs no proxy)."""

            def on(server: Toxiproxy) -> list[str]:
                proxies = {n: p for n, p in server.proxies().items() if of_link(n, self.link)}
                for proxy in proxies.values():
                    proxy.add_toxic(name=TOXIC_NAME, **spec)
                return sorted(proxies)

            host, port = node.endpoint(tp.API_PORT)
            return tp.on_server(host, port, on) if tp.answers(host, port) else []

        done = on_nodes(by_name(cluster, names), add)
        return self.plan() | {"targets": names, "proxies": done, "mechanism": "toxiproxy"}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        on_nodes(by_name(cluster, self.touched), heal)
        healed, self.touched = self.touched, []
        return self.plan() | {"healed": healed}


def heal(node: Node) -> list[str]:
    """Every toxic off the node's proxies, and the connections open through them closed;
    nothing where no server runs.

    Closed, because noxious 1.0.4 loses track of a connection once its toxics have changed
    twice: a toxic removed (or a reset) may then stay on a connection that was open, for as long
    as it stays open. Disabling and enabling a proxy ends those connections (clients reconnect,
    with no toxic), so that a healed link is healed."""
    try:
        host, port = node.endpoint(tp.API_PORT)
    except InfraError:  # a node brought up before its ports were published for a proxy
        return []
    if not tp.answers(host, port):
        return []
    try:
        toxics = tp.on_server(host, port, _remove_toxics)
    except requests.RequestException:
        return []
    return [f"removed the toxics {toxics}"] if toxics else []


def _remove_toxics(server: Toxiproxy) -> list[str]:
    proxies = server.proxies()
    removed = [f"{name}/{toxic}" for name, p in proxies.items() for toxic in p.toxics()]
    server.reset()
    if removed:
        for proxy in proxies.values():
            proxy.disable()
            proxy.enable()
    return removed


def interpose(cluster: ClusterKind, endpoints: list[Endpoint]) -> list[Endpoint]:
    """The endpoints with a proxy in front of each node they reach: the proxy listens on the
    node's `proxy_port(port)` and forwards to its port; each node's server is started first."""
    behind: dict[tuple[str, int], tuple[Node, int]] = {}
    for node in cluster.nodes:
        for port in cluster.ports:
            behind[node.endpoint(port)] = (node, port)
    started: dict[str, tuple[str, int]] = {}
    via: dict[tuple[str, int], tuple[str, int]] = {}

    def through(host: str, port: int) -> tuple[str, int]:
        if (host, port) in via:
            return via[(host, port)]
        if (host, port) not in behind:
            raise InfraError(f"no node of {cluster.cluster} serves {host}:{port}: no proxy for it")
        node, inner = behind[(host, port)]
        if node.name not in started:
            started[node.name] = start_on(node)
        listen = f"0.0.0.0:{tp.proxy_port(inner)}"

        def create(server: Toxiproxy) -> None:
            name = f"{CLIENT}-{inner}"
            if server.get_proxy(name) is None:
                server.create(upstream=f"127.0.0.1:{inner}", name=name, listen=listen)

        tp.on_server(*started[node.name], create)
        via[(host, port)] = node.endpoint(tp.proxy_port(inner))
        return via[(host, port)]

    return [rewrite(ep, through) for ep in endpoints]


def rewrite(ep: Endpoint, through: Callable[[str, int], tuple[str, int]]) -> Endpoint:
    """The endpoint with each host:port replaced by `through(host, port)`, its node names kept."""
    hosts = ep.host.split(",")
    ports = str(ep.port).split(",")
    pairs = [(h, int(ports[min(i, len(ports) - 1)])) for i, h in enumerate(hosts)]
    moved = [through(h, p) for h, p in pairs]
    renamed = {f"{h}:{p}": f"{nh}:{np}" for (h, p), (nh, np) in zip(pairs, moved, strict=True)}
    return dataclasses.replace(
        ep,
        host=",".join(h for h, _ in moved),
        port=moved[0][1] if len(moved) == 1 else ",".join(str(p) for _, p in moved),
        nodes=tuple((renamed.get(k, k), n) for k, n in ep.nodes),
        reads=rewrite(ep.reads, through) if ep.reads else None,
    )
