"""The toxic fault's plan and the endpoints rewritten through the proxies, without any node."""

from __future__ import annotations

import random
from itertools import islice

import nemesis
from clusters.kinds.links import of_link, proxy_name
from clusters.registry import cluster_kind
from core.endpoint import Endpoint
from nemesis.schedule import plan
from nemesis.toxic import STREAMS, TOXICS, ToxicFault, rewrite

NODES = ["n1", "n2", "n3"]


def test_toxics_are_drawn_from_the_seed_with_their_amounts() -> None:
    faults = [ToxicFault.planned(NODES, random.Random(seed)) for seed in range(200)]
    assert {f.toxic for f in faults} == set(TOXICS)
    assert {f.stream for f in faults} == set(STREAMS)
    assert {f.link for f in faults} == {"client"}  # a kind with no internal link
    first = ToxicFault.planned(NODES, random.Random(7)).plan()
    assert first == ToxicFault.planned(NODES, random.Random(7)).plan()
    assert first["fault"] == "toxic" and first["link"] == "client"
    assert first["attributes"] == TOXICS[first["toxic"]]
    assert first["targets"] and set(first["targets"]) <= set(NODES)
    steps = list(islice(plan(nemesis.packages(["toxic"], 3), NODES, 0, 10.0), 50))
    assert {s.fault.name for s in steps} == {"toxic"}


def test_a_kinds_internal_links_are_drawn_beside_the_clients() -> None:
    """The package reads the kind's links: each is drawn, as the clients' link is."""
    toxic = nemesis.packages(["toxic"], 5, links=("safekeeper",))
    steps = list(islice(plan(toxic, [f"n{i}" for i in range(1, 6)], 0, 10.0), 60))
    links = [s.fault.plan()["link"] for s in steps]
    assert set(links) == {"client", "safekeeper"}
    assert 15 <= links.count("safekeeper") <= 45
    for kind in ("safekeeper", "streaming", "patroni"):
        declared = cluster_kind(kind).links
        assert declared and all(link.name != "client" for link in declared)
    assert cluster_kind("single").links == ()


def test_a_proxy_name_says_its_link() -> None:
    assert of_link(proxy_name("safekeeper", "n3", 7676), "safekeeper")
    assert not of_link(proxy_name("safekeeper", "n3", 7676), "client")
    assert of_link("client-5432", "client") and not of_link("clients-5432", "client")


def test_only_a_package_that_acts_on_proxies_puts_them_in_place() -> None:
    eps = [Endpoint("n1", "127.0.0.1", 5432, "db", "u")]
    assert nemesis.interposed(["partition", "kill"], None, eps) is eps  # type: ignore[arg-type]
    assert nemesis.PACKAGES["toxic"].interposes
    assert nemesis.interposes(["kill", "toxic"]) and not nemesis.interposes(["kill", "packet"])
    assert nemesis.interposes(["all"]) and nemesis.interposes(["packet", "all"])
    assert "toxic" in [p.name for p in nemesis.packages(["all"], 1, power=False)]


def test_an_endpoint_is_rewritten_host_by_host_with_its_node_names() -> None:
    moved = {("127.0.0.1", 1001): ("127.0.0.1", 2001), ("127.0.0.1", 1002): ("127.0.0.1", 2002)}
    reads = Endpoint("n2", "127.0.0.1", 1002, "db", "u")
    ep = Endpoint(
        "n1", "127.0.0.1,127.0.0.1", "1001,1002", "db", "u", "read-write",
        nodes=(("127.0.0.1:1001", "n1"), ("127.0.0.1:1002", "n2")), reads=reads,
    )  # fmt: skip
    got = rewrite(ep, lambda h, p: moved[(h, p)])
    assert (got.host, got.port) == ("127.0.0.1,127.0.0.1", "2001,2002")
    assert got.nodes == (("127.0.0.1:2001", "n1"), ("127.0.0.1:2002", "n2"))
    assert got.reads is not None and (got.reads.port, got.reads.node) == (2002, "n2")
    assert got.target_session_attrs == "read-write" and got.dbname == "db"
    single = rewrite(Endpoint("n1", "127.0.0.1", 1001, "db", "u"), lambda h, p: moved[(h, p)])
    assert single.port == 2001
