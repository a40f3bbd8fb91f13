"""Which address the Docker backend gives clients: the node's own only where this machine holds
its network's gateway (a local engine's bridge), else None, for the published port."""

from __future__ import annotations

from clusters.docker_backend import direct_address


def test_a_network_whose_gateway_this_machine_holds_is_reached_directly() -> None:
    networks = {"harness-x": {"IPAddress": "172.31.7.2", "Gateway": "127.0.0.1"}}
    assert direct_address(networks) == "172.31.7.2"


def test_a_gateway_elsewhere_means_the_published_port() -> None:
    # 192.0.2.0/24 is for documentation (RFC 5737): no machine holds it
    networks = {"harness-x": {"IPAddress": "192.0.2.7", "Gateway": "192.0.2.1"}}
    assert direct_address(networks) is None


def test_a_container_without_an_address_means_the_published_port() -> None:
    assert direct_address({}) is None
    assert direct_address({"harness-x": {"IPAddress": "", "Gateway": ""}}) is None
