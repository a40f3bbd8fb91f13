"""Cluster kinds and backends, registered in one place: a new one is one line here."""

from __future__ import annotations

from clusters.backend import Backend
from clusters.kind import ClusterKind
from clusters.single import SingleCluster
from harness.errors import BadInput

CLUSTER_KINDS: dict[str, type[ClusterKind]] = {k.name: k for k in (SingleCluster,)}


def backend_names() -> list[str]:
    return ["docker"]


def make_backend(name: str) -> Backend:
    """Construct a backend by name; the import is lazy so `--help` needs no engine."""
    if name == "docker":
        from clusters.docker_backend import DockerBackend

        return DockerBackend()
    raise BadInput(f"unknown backend {name!r}: choose from {', '.join(backend_names())}")


def cluster_kind(name: str) -> type[ClusterKind]:
    if name not in CLUSTER_KINDS:
        raise BadInput(f"unknown cluster kind {name!r}: choose from {', '.join(CLUSTER_KINDS)}")
    return CLUSTER_KINDS[name]
