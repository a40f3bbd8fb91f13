"""The connection-fault proxies on a cluster's nodes: one `harness-toxiproxy` server per node,
with a proxy for each link a fault may act on.

Two sorts of link. The clients' (`CLIENT`): a proxy in front of each port a client reaches,
listening on the node's `proxy_port(port)`, which the run's endpoints are rewritten to go
through (nemesis.toxic.interpose). And the links a kind declares as internal (`Link`): a
daemon on one node dials another node's port through a proxy on its own node
(`internal_address`), so that a toxic on that proxy slows or cuts, say, a compute's proxy's
stream to one safekeeper and nothing else. A proxy's name says its link: `client-5432`,
`safekeeper-n3-7676`.
"""

from __future__ import annotations

from dataclasses import dataclass

from toxiproxy import Toxiproxy

from clusters import toxiproxy_server as tp
from clusters.backend import Node
from clusters.kinds.on_node import start_once

CLIENT = "client"
INTERNAL_BASE = 30000  # a node's internal proxies listen on loopback from this port up


@dataclass(frozen=True)
class Link:
    """A link between a kind's daemons that a connection fault may act on."""

    name: str  # the first part of its proxies' names; a fault's `link`
    about: str  # which daemon dials which, for --help and the report


def proxy_name(link: str, peer: str, port: int) -> str:
    return f"{link}-{peer}-{port}"


def of_link(proxy: str, link: str) -> bool:
    """Whether the proxy named so stands on `link`."""
    return proxy.startswith(f"{link}-")


def start_on(node: Node) -> tuple[str, int]:
    """The node's server, started unless it answers (the binary shipped first); where its API
    answers from here."""
    host, port = node.endpoint(tp.API_PORT)
    if tp.answers(host, port):  # asked each time a daemon that dials through it starts
        return host, port
    node.put_file(tp.NODE_BINARY, tp.ensure_binary().read_bytes(), mode=0o755)
    start_once(
        node,
        f"[h]arness-toxiproxy --host 0.0.0.0 --port {tp.API_PORT}",
        f"{tp.NODE_BINARY} --host 0.0.0.0 --port {tp.API_PORT}",
        tp.NODE_LOG,
    )
    tp.wait_ready(host, port)
    return host, port


def internal_address(node: Node, link: str, peer: str, port: int) -> tuple[str, int]:
    """Where a daemon on `node` dials `peer:port` through a proxy on its own node: the proxy
    made (and the node's server started) unless there; on loopback, so that only that daemon
    goes through it. A proxy keeps its port once made: a daemon started again dials the same."""
    api = start_on(node)
    name = proxy_name(link, peer, port)

    def ensure(server: Toxiproxy) -> int:
        proxies = server.proxies()
        if name in proxies:
            return int(proxies[name].listen.rsplit(":", 1)[1])
        taken = {int(p.listen.rsplit(":", 1)[1]) for p in proxies.values()}
        listen = next(p for p in range(INTERNAL_BASE, INTERNAL_BASE + 1000) if p not in taken)
        server.create(upstream=f"{peer}:{port}", name=name, listen=f"127.0.0.1:{listen}")
        return listen

    return "127.0.0.1", tp.on_server(*api, ensure)
