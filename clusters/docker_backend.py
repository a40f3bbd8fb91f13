"""Nodes as Docker containers on a private bridge network, one network per cluster.

Everything the backend makes carries the labels `harness.cluster` (and, on containers,
`harness.node`), so a cluster is found, listed and removed by label, including one that a
crashed run left behind, and nothing else on the engine is ever touched.
"""

from __future__ import annotations

import io
import posixpath
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container
from docker.models.networks import Network
from docker.types import Mount
from rich.console import Console

from clusters import power
from clusters.backend import (
    LOG_DIR,
    Backend,
    ExecResult,
    Node,
    each,
    in_order,
    local_owner,
    shell_quote,
)
from clusters.image import NODE_IMAGE, ImageSpec, engine_client, ensure_image
from core.errors import InfraError

CLUSTER_LABEL = "harness.cluster"
NODE_LABEL = "harness.node"
POWER_LABEL = "harness.power"  # the control socket of the node's power layer, when it has one
START_TIMEOUT = 30.0


@contextmanager
def _engine(doing: str) -> Iterator[None]:
    """Turn engine failures into InfraError (exit 255) that says what was being done."""
    try:
        yield
    except (DockerException, requests.RequestException) as exc:
        raise InfraError(f"{doing}: {exc}") from exc


class DockerNode(Node):
    """A container of a cluster; its `harness.node` label (n1, n2, …) is its name and hostname."""

    def __init__(self, container: Container, direct: bool = True) -> None:
        self._container = container
        self.name = container.labels[NODE_LABEL]
        self._direct = direct  # whether `endpoint` may give the node's own address
        # A published port keeps its host port for the container's life (the harness never
        # restarts a container), and polls ask for it every round: the engine is asked once.
        self._ports: dict[int, tuple[str, int]] = {}

    def power_control(self) -> Path | None:
        control = self._container.labels.get(POWER_LABEL)
        return Path(control) if control else None

    def __repr__(self) -> str:
        return f"DockerNode({self._container.name})"

    def _shell(self, cmd: str, user: str, env: dict[str, str], detach: bool) -> ExecResult:
        with _engine(f"running a command on {self.name}"):
            code, output = self._container.exec_run(
                ["sh", "-c", cmd], user=user, environment=env or None, detach=detach
            )
        # Detached, the engine says neither a code nor output (it started, did not finish).
        return ExecResult(0, "") if detach else ExecResult(code, output.decode(errors="replace"))

    def _put_file(self, path: str, data: bytes, mode: int, owner: str) -> None:
        parent, base = posixpath.split(path)
        self.put_files(parent, {base: data}, mode=mode, owner=owner)

    def put_files(
        self, directory: str, files: Mapping[str, bytes], *, mode: int = 0o644, owner: str = "root"
    ) -> None:
        """One archive for them all: each exec and each transfer is a round trip to the engine,
        seconds a run under load when every file went on its own."""
        if not posixpath.isabs(directory):
            raise ValueError(f"put_files needs an absolute directory, not {directory!r}")
        self.exec(f"mkdir -p -- {shell_quote(directory)}")
        buf = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = mode
                info.mtime = now
                tar.addfile(info, io.BytesIO(data))
        with _engine(f"writing {', '.join(files)} into {directory} on {self.name}"):
            self._container.put_archive(directory, buf.getvalue())
        if owner != "root" and files:
            # The archive carries uid 0; names resolve only inside the node, so chown there.
            paths = " ".join(shell_quote(posixpath.join(directory, n)) for n in files)
            self.exec(f"chown -- {shell_quote(owner)}: {paths}")

    def get(self, path: str, dest: Path) -> bool:
        try:
            with _engine(f"copying {path} from {self.name}"):
                stream, _ = self._container.get_archive(path)
                # Spool to disk: a data directory or a log may be larger than memory.
                with tempfile.TemporaryFile() as spool:
                    for chunk in stream:
                        spool.write(chunk)
                    spool.seek(0)
                    dest.mkdir(parents=True, exist_ok=True)
                    with tarfile.open(fileobj=spool) as tar:
                        tar.extractall(dest, filter=local_owner)
        except InfraError as exc:
            if isinstance(exc.__cause__, NotFound):
                return False
            raise
        return True

    def logs(self) -> str:
        with _engine(f"reading the logs of {self.name}"):
            return self._container.logs(stdout=True, stderr=True).decode(errors="replace")

    def endpoint(self, port: int) -> tuple[str, int]:
        """The node's own address on its cluster's network where this machine is on that
        network (a local engine on Linux, whose bridges are this machine's interfaces), else
        the port published on loopback. Directly, the traffic skips the engine's userland
        proxy, a process that copied every byte of every client's connection (as much CPU as
        Postgres under load); the node sees it come from the same address either way, the
        bridge's gateway."""
        if port in self._ports:
            return self._ports[port]
        with _engine(f"reading the ports of {self.name}"):
            self._container.reload()
        settings = self._container.attrs["NetworkSettings"]
        bindings = settings["Ports"].get(f"{port}/tcp") or []
        published = [int(b["HostPort"]) for b in bindings if b["HostIp"] == "127.0.0.1"]
        if not published:
            raise InfraError(f"port {port} of {self.name} is not published: pass it to up()")
        address = direct_address(settings.get("Networks") or {}) if self._direct else None
        self._ports[port] = (address, port) if address else ("127.0.0.1", published[0])
        return self._ports[port]


class DockerBackend(Backend):
    """Clusters as containers of the node image on the local (or `base_url`) Docker engine."""

    name = "docker"
    offers_power = True

    def __init__(
        self,
        image_spec: ImageSpec = NODE_IMAGE,
        *,
        base_url: str | None = None,
        console: Console | None = None,
        power: bool = False,
        state_volume: bool = True,
        direct: bool = True,
    ) -> None:
        # Checked now so that an absent engine is a clear BadInput before any work starts.
        self.client = engine_client(base_url)
        # Each node's state on a volume of its own (below); off for containers that stand for
        # hosts of another backend, on which /var/lib/harness is the harness's to make.
        self.state_volume = state_volume
        # Clients reach a node at its own address where they can (DockerNode.endpoint); off:
        # through the published ports alone, as another machine's hosts are reached (the ssh
        # backend's tests map those ports).
        self.direct = direct
        self._spec = image_spec
        self._console = console
        self.power = power

    def image(self, spec: ImageSpec | None = None) -> str:
        """The node image's tag (or `spec`'s), built first if it is missing (minutes, once)."""
        return ensure_image(spec or self._spec, self._console, client=self.client)

    def _up(
        self, cluster: str, count: int, ports: list[int], image: ImageSpec | None
    ) -> list[Node]:
        if self.nodes(cluster) or self._networks(cluster):
            raise InfraError(f"cluster {cluster} is already up: take it down first")
        tag = self.image(image)
        network_name = f"harness-{cluster}"
        made: list[Container] = []
        network = None
        try:
            with _engine(f"creating cluster {cluster}"):
                network = self.client.networks.create(
                    network_name,
                    driver="bridge",
                    labels={CLUSTER_LABEL: cluster},
                    check_duplicate=True,
                )
                for i in range(1, count + 1):
                    node = f"n{i}"
                    layer = power.mount(cluster, node) if self.power else None
                    # The node's state and its logs on volumes of their own, on the host's
                    # filesystem: writes there skip the image's layered one (fuse-overlayfs on
                    # some engines, where Postgres's writes and fsyncs cost twice its own CPU,
                    # and every append to a log asks the layer for the file's attributes).
                    # Removed with the container.
                    volumes = (
                        [
                            Mount(target=d, source=None, type="volume")
                            for d in ([] if layer else [power.NODE_DIR]) + [LOG_DIR]
                        ]
                        if self.state_volume
                        else []
                    )
                    extra = (
                        {
                            "volumes": {
                                str(layer.mount_point): {"bind": power.NODE_DIR, "mode": "rw"}
                            },
                            "labels": {
                                CLUSTER_LABEL: cluster,
                                NODE_LABEL: node,
                                POWER_LABEL: str(layer.control),
                            },
                            "mounts": volumes,
                        }
                        if layer
                        else {
                            "labels": {CLUSTER_LABEL: cluster, NODE_LABEL: node},
                            "mounts": volumes,
                        }
                    )
                    container = self.client.containers.create(
                        tag,
                        name=f"harness-{cluster}-{node}",
                        hostname=node,
                        cap_add=["NET_ADMIN", "NET_RAW"],
                        network=network_name,
                        networking_config={
                            network_name: self.client.api.create_endpoint_config(aliases=[node])
                        },
                        ports={f"{p}/tcp": ("127.0.0.1", None) for p in ports},
                        **extra,
                    )
                    made.append(container)
                # Started side by side: each start is the engine's network set-up and layer
                # mount, a second or more apiece on a loaded machine.
                each(_start, made)
        except BaseException:
            # Leave nothing half-made behind; the original error is the one worth reporting.
            for container in made:
                with suppress(DockerException, requests.RequestException):
                    container.remove(force=True, v=True)
            if network is not None:
                with suppress(DockerException, requests.RequestException):
                    network.remove()
            power.unmount_cluster(cluster)
            raise
        return self.nodes(cluster)

    def nodes(self, cluster: str) -> list[Node]:
        return in_order(DockerNode(c, self.direct) for c in self._containers(cluster))

    def clusters(self) -> list[str]:
        with _engine("listing clusters"):
            containers = self.client.containers.list(
                all=True, filters={"label": CLUSTER_LABEL}, ignore_removed=True
            )
            networks = self.client.networks.list(filters={"label": CLUSTER_LABEL})
        names = {c.labels[CLUSTER_LABEL] for c in containers}
        names |= {n.attrs["Labels"][CLUSTER_LABEL] for n in networks}
        return sorted(names)

    def down(self, cluster: str) -> list[str]:
        removed = []
        with _engine(f"removing cluster {cluster}"):
            containers = self._containers(cluster)
            # side by side, as they were started
            gone = each(lambda c: _gone_after(lambda: c.remove(force=True, v=True)), containers)
            removed += [c.name for c, went in zip(containers, gone, strict=True) if went]
            for network in self._networks(cluster):
                if _gone_after(network.remove):
                    removed.append(network.name)
        # once no container holds them: the power layers of the nodes (also after a crash)
        removed += [f"power layer {p}" for p in power.unmount_cluster(cluster)]
        return removed

    def _containers(self, cluster: str) -> list[Container]:
        with _engine(f"listing the nodes of {cluster}"):
            found = self.client.containers.list(
                all=True, filters={"label": f"{CLUSTER_LABEL}={cluster}"}, ignore_removed=True
            )
        return [c for c in found if NODE_LABEL in c.labels]

    def _networks(self, cluster: str) -> list[Network]:
        with _engine(f"listing the networks of {cluster}"):
            return self.client.networks.list(filters={"label": f"{CLUSTER_LABEL}={cluster}"})


def direct_address(networks: Mapping[str, Mapping[str, str]]) -> str | None:
    """A container's address on its network (`NetworkSettings.Networks`) when this machine can
    reach it: it holds the network's gateway address (binding to an address succeeds only on
    the machine that has it). None on a remote engine or in a virtual machine's (Docker
    Desktop), where only the published ports reach the node."""
    for settings in networks.values():
        address, gateway = settings.get("IPAddress"), settings.get("Gateway")
        if not address or not gateway:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind((gateway, 0))
        except OSError:
            continue
        return address
    return None


def _gone_after(remove: Callable[[], object]) -> bool:
    """Run a removal; False when the thing was already gone (a concurrent down got there)."""
    try:
        remove()
    except NotFound:
        return False
    return True


def _start(container: Container) -> None:
    """Start the container and wait until it runs; one that exited at once is reported with its
    log."""
    container.start()
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        container.reload()
        if container.status == "running":
            return
        if container.status in ("exited", "dead") or time.monotonic() > deadline:
            log = container.logs().decode(errors="replace").strip()[-500:]
            raise InfraError(f"{container.name} did not start ({container.status}): {log}")
        time.sleep(0.1)
