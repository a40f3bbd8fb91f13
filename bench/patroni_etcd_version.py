"""Patroni started while a new etcd 3.4 ensemble still reports cluster version 3.0 (FINDINGS.md,
Patroni finding 4): the ensemble is brought up with one of its three servers held back, so that
it has a quorum and says it is healthy, but cannot raise its cluster version; n1's Patroni is
started then, and the third server a minute later. Prints when n1 bootstrapped, and its log's
lines about etcd. With `--proxied` the members reach etcd through proxies (Patroni's
`use_proxies`), as the kind's runs with connection faults have them.

    .venv/bin/python bench/patroni_etcd_version.py [--hold 60] [--after 90] [--proxied]
"""

from __future__ import annotations

import argparse
import time

import requests

from clusters.backend import Node
from clusters.docker_backend import DockerBackend
from clusters.kinds import patroni
from core.errors import InfraError

ETCD_LINES = (
    "grep -E 'etcd|v3alpha|v3beta|leader with the lock|bootstrap' /var/log/harness/patroni.log"
)


class HeldBack(patroni.PatroniCluster):
    """The kind as deployed, with its last etcd server held back and no wait for the version."""

    held = True

    def start_etcd(self, node: Node) -> None:
        if not (self.held and node.name == self.etcds()[-1].name):
            super().start_etcd(node)

    def _etcd_healthy(self) -> bool:
        host, port = self.etcds()[0].endpoint(patroni.ETCD_PORT)
        return bool(requests.get(f"http://{host}:{port}/health", timeout=2).ok)

    def cluster_version(self) -> str:
        host, port = self.etcds()[0].endpoint(patroni.ETCD_PORT)
        return str(requests.get(f"http://{host}:{port}/version", timeout=2).json()["etcdcluster"])


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hold", type=float, default=60, help="seconds n1 is given to bootstrap")
    parser.add_argument("--after", type=float, default=90, help="seconds given once it joined")
    parser.add_argument("--proxied", action="store_true", help="etcd through proxies")
    args = parser.parse_args()
    patroni.DEPLOY_WAIT_S = args.hold
    options = {"members": 2, "patroni_sync": "off", "ttl": 30, "read_from": "primary"}
    backend = DockerBackend()
    backend.proxied = args.proxied
    cluster = HeldBack(backend, f"pev{int(time.time()) % 10000}", options)
    try:
        try:
            cluster.deploy(say)
            say("n1 bootstrapped with the third etcd server held back")
        except InfraError as e:
            say(f"not deployed: {str(e).splitlines()[0]}")
        say(f"etcd's cluster version: {cluster.cluster_version()}")
        n1 = cluster.nodes[0]
        print(n1.exec(f"{ETCD_LINES} | head -8", check=False).output, flush=True)
        say(f"starting the third etcd server, {cluster.etcds()[-1].name}")
        cluster.held = False
        cluster.start_etcd(cluster.etcds()[-1])
        began = time.monotonic()
        while time.monotonic() - began < args.after and cluster.leader_key() != "n1":
            time.sleep(1)
        holder = cluster.leader_key()
        say(f"etcd's cluster version: {cluster.cluster_version()}; leader key: {holder}")
        print(n1.exec(f"{ETCD_LINES} | tail -4", check=False).output, flush=True)
    finally:
        cluster.teardown()


if __name__ == "__main__":
    main()
