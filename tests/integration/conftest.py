"""Fixtures for tests against a real Docker engine: the backend, and cluster names that are
always taken down, so a failing test leaves no container behind."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.console import Console

from clusters.docker_backend import DockerBackend
from clusters.image import NODE_IMAGE, ensure_image
from clusters.kinds.safekeeper import SafekeeperCluster
from core.errors import BadInput
from nemesis.kill import KillProcess
from nemesis.processes import process_table, tree
from tests.integration.zookeeper import zookeeper  # noqa: F401 (a fixture for the Manatee tests)


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


@pytest.fixture(scope="module")
def safekeeper_cluster(
    docker_backend: DockerBackend, module_cluster_name: str
) -> Iterator[SafekeeperCluster]:
    """A `safekeeper` cluster for the module (n1 compute, n2…n4 safekeepers), taken down with
    the module's cluster name."""
    options = {"safekeepers": 3, "computes": 1}
    cluster = SafekeeperCluster(docker_backend, module_cluster_name, options)
    cluster.deploy(lambda msg: None)
    yield cluster


def eventually(
    check: Callable[[], Any], what: str, timeout: float = 30.0, why: Callable[[], str] = str
) -> Any:
    """Poll `check` until it returns something true; else fail naming what never happened,
    the last error, and whatever `why` adds (logs, say)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except Exception as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(
        f"{what} did not happen within {timeout:g}s" + (f": {last}" if last else "") + why()
    )


def kill_manager_alone(kind: Any, manager: str, primary: str, write: Callable[[], None]) -> None:
    """Kill the failover manager's process (`manager`, one the kind runs) alone on the primary:
    every process of it is gone, the postmaster is the one that ran before, and a commit
    still goes through; the fault's stop starts the manager again."""
    node = next(n for n in kind.nodes if n.name == primary)
    patterns = kind.processes()
    postmaster = tree(process_table(node), patterns["postgres"])[0]
    fault = KillProcess(manager, "primaries", 0.0)
    try:
        done = fault.start(kind)
        assert done["targets"] == [primary] and done["killed"][primary], done
        procs = process_table(node)
        assert not tree(procs, patterns[manager]), f"a {manager} process survived"
        assert postmaster in {p.pid for p in procs}, "its Postgres was killed too"
        write()
    finally:
        fault.stop(kind)
