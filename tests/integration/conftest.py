"""Fixtures for tests against a real Docker engine: the backend, and cluster names that are
always taken down, so a failing test leaves no container behind."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from rich.console import Console

from clusters.docker_backend import DockerBackend
from clusters.image import NODE_IMAGE, ensure_image
from harness.errors import BadInput


def _new_cluster_name() -> str:
    """A name no other test (or engineer) uses, so cleanup by label touches only ours."""
    return f"t{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def docker_backend(request: pytest.FixtureRequest) -> DockerBackend:
    """The backend, with the node image built (about a minute and a half the first time)."""
    try:
        backend = DockerBackend()
    except BadInput as exc:
        pytest.skip(str(exc))
    capture = request.config.pluginmanager.getplugin("capturemanager")
    # Out of pytest's capture, so whoever waits sees why and how far the build is.
    with capture.global_and_fixture_disabled():
        tag = NODE_IMAGE.tag()
        if not backend.client.images.list(name=tag):
            console = Console(stderr=True)
            console.print(f"\nbuilding the node image {tag} for the docker tests")
            ensure_image(NODE_IMAGE, console, client=backend.client)
    return backend


@pytest.fixture
def cluster_name(docker_backend: DockerBackend) -> Iterator[str]:
    """A fresh cluster name; whatever the test brought up under it is taken down afterwards."""
    name = _new_cluster_name()
    yield name
    docker_backend.down(name)


@pytest.fixture(scope="module")
def module_cluster_name(docker_backend: DockerBackend) -> Iterator[str]:
    """As `cluster_name`, for a cluster a whole module shares: containers take seconds to start."""
    name = _new_cluster_name()
    yield name
    docker_backend.down(name)
