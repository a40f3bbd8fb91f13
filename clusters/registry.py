"""Cluster kinds and backends, registered in one place: a new one is one line here."""

from __future__ import annotations

from typing import Any

from clusters.backend import Backend
from clusters.kinds.autofailover import AutofailoverCluster
from clusters.kinds.base import ClusterKind, KindOption
from clusters.kinds.manatee import ManateeCluster
from clusters.kinds.patroni import PatroniCluster
from clusters.kinds.repmgr import RepmgrCluster
from clusters.kinds.safekeeper import SafekeeperCluster
from clusters.kinds.single import SingleCluster
from clusters.kinds.streaming import StreamingCluster
from clusters.kinds.tarantool import TarantoolCluster
from core.errors import BadInput

CLUSTER_KINDS: dict[str, type[ClusterKind]] = {
    k.name: k
    for k in (
        SingleCluster,
        SafekeeperCluster,
        TarantoolCluster,
        ManateeCluster,
        StreamingCluster,
        PatroniCluster,
        AutofailoverCluster,
        RepmgrCluster,
    )
}


def kind_summaries() -> str:
    """Each kind's name and what it is, for `--cluster`'s help."""
    return "; ".join(f"{k.name} ({k.about})" for k in CLUSTER_KINDS.values())


def backend_names() -> list[str]:
    return ["docker", "local", "ssh"]


def make_backend(name: str, **ssh: Any) -> Backend:
    """Construct a backend by name; the import is lazy so `--help` needs no engine.

    The keyword options describe the ssh backend's hosts and how to log in to them
    (SshBackend.from_options)."""
    if name != "ssh" and any(ssh.values()):
        raise BadInput(
            "--node, --nodes-file, --ssh-key, --known-hosts and --ssh-insecure "
            "apply to --backend ssh only"
        )
    if name == "docker":
        from clusters.docker_backend import DockerBackend

        return DockerBackend()
    if name == "local":
        from clusters.local_backend import LocalBackend

        return LocalBackend()
    if name == "ssh":
        from clusters.ssh_backend import SshBackend

        return SshBackend.from_options(**ssh)
    raise BadInput(f"unknown backend {name!r}: choose from {', '.join(backend_names())}")


def cluster_kind(name: str) -> type[ClusterKind]:
    if name not in CLUSTER_KINDS:
        raise BadInput(f"unknown cluster kind {name!r}: choose from {', '.join(CLUSTER_KINDS)}")
    return CLUSTER_KINDS[name]


def kind_options(kind: str, given: dict[str, Any]) -> dict[str, Any]:
    """The kind-specific options that were given, refusing those another kind takes."""
    own = {o.name for o in cluster_kind(kind).cli_options}
    for name, value in given.items():
        if value is not None and name not in own:
            flag = "--" + name.replace("_", "-")
            owners = [
                k for k, c in CLUSTER_KINDS.items() if name in {o.name for o in c.cli_options}
            ]
            raise BadInput(f"{flag} applies to --cluster {' or '.join(owners)} only, not {kind}")
    return {name: value for name, value in given.items() if value is not None}


def all_kind_options() -> list[KindOption]:
    """Every kind's own options, once each, for the command line."""
    seen: dict[str, KindOption] = {}
    for kind in CLUSTER_KINDS.values():
        for option in kind.cli_options:
            seen.setdefault(option.name, option)
    return list(seen.values())
