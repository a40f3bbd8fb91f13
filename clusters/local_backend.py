"""Nodes as Linux namespaces on this machine: root, no Docker.

Each node is an init (tini from the node root filesystem) in its own network, mount, UTS, IPC and
PID namespaces. Its root is an overlay: a shared, read-only Debian tree made once per package set
with the node image's debootstrap recipe, plus the node's own upper directory, so a cluster kind's
absolute paths (/var/lib/harness/pgdata, /usr/lib/postgresql/15/bin) work unchanged and nodes
never share a data directory. The init pivots into that root, so nothing of the host's mounts
stays reachable (or pinned) from a node, and as PID 1 it reaps what a fault kills.

The nodes of a cluster hang on a bridge in a switch network namespace of their own; the host has
one veth into it with the gateway address of the cluster's /24, so the harness reaches every port
of every node at the node's address, and node-to-node traffic never crosses the host's firewall.
The host's iptables are not touched at all.

Everything is found by name, so `down` works after the process that made a cluster was killed:
the inits' launchers by their command line (which holds the node directory), the node directories
/var/lib/harness-local/clusters/<cluster>/, the switch namespace `harness-local:<cluster>`, the
host veth whose alias is that same name, and /run/harness-local/<cluster>/, whose state.json says
where each node's init is (pid and start time) for `exec` from any process.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import posixpath
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from clusters import power
from clusters.backend import (
    CLUSTER_NAME,
    Backend,
    ExecResult,
    Node,
    NodeCommandError,
    in_order,
    local_owner,
    shell_quote,
)
from clusters.image import NODE_IMAGE, ImageSpec, debian_mirror, make_rootfs, remove_tree
from core.errors import BadInput, InfraError

PREFIX = "harness-local"
VAR_DIR = Path("/var/lib/harness-local")
ROOTFS_DIR = VAR_DIR / "rootfs"
CLUSTERS_DIR = VAR_DIR / "clusters"
RUN_DIR = Path("/run/harness-local")
NETNS_DIR = Path("/run/netns")
# Bump when the local rootfs is made differently from the image's base, so old ones are not reused.
ROOTFS_RECIPE = 1
# Each cluster takes the first /24 of this /16 that no address or route of the host overlaps.
SUPERNET = ipaddress.ip_network("10.77.0.0/16")
# What the node image sets with ENV, and what every command on a node starts from.
NODE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
START_TIMEOUT = 30.0
# As the Docker backend's API timeout: a node command (initdb, a base backup) may take minutes.
EXEC_TIMEOUT = 600.0
# The exit code of `get`'s script when the path is missing: tar itself exits 0, 1 or 2.
MISSING = 3
# Docker's rule for container names, kept so that a name is valid on both backends; it also keeps

# A node's init, run by the host's sh in the node's new namespaces ($1 lower rootfs, $2 node
# directory, $3 hostname, $4 the power layer's mount point to put at /var/lib/harness, or "").
# The sh is PID 1 of the new PID namespace until it execs tini.
_INIT = r"""
set -eu
lower=$1 dir=$2 root=$2/root
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$dir/upper,workdir=$dir/work" "$root"
if [ -n "$4" ]; then
    mkdir -p "$root/var/lib/harness"
    mount --bind "$4" "$root/var/lib/harness"
fi
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for dev in null zero full random urandom tty; do
    touch "$root/dev/$dev"
    mount --bind "/dev/$dev" "$root/dev/$dev"
done
mkdir "$root/dev/shm" "$root/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
echo "$3" > /proc/sys/kernel/hostname
cd "$root"
pivot_root . .
umount -l .
exec /usr/bin/tini -s -- sleep infinity
"""

# Every namespace but the user's (mounts and iptables need real root). With --kill-child the
# launcher's death kills the init, so the launcher is the node's handle.
_UNSHARE = [
    "unshare",
    "--net",
    "--mount",
    "--uts",
    "--ipc",
    "--pid",
    "--kill-child",
    "--propagation=private",
    "--",
]

# Inside a node: become user $1 (uid, primary gid, supplementary groups, HOME) and exec the rest.
# Every step execs, so the command is the only process left: `Node.signal`'s pgrep must not find
# a wrapper whose command line holds its pattern (runuser would stay behind as one).
_AS_USER = r"""
IFS=: read -r _ _ uid gid _ home _ <<END
$(getent passwd "$1")
END
[ -n "$uid" ] || { echo "no user $1 on this node" >&2; exit 126; }
shift
export HOME="$home"
exec setpriv --reuid="$uid" --regid="$gid" --init-groups "$@"
"""

# Detached: a new session, reparented to the node's tini at once, its stdio off our pipe so that
# `exec` returns at once.
_DETACH = 'exec setsid -f sh -c "$1" </dev/null >/dev/null 2>&1'

# The init launchers this process started, by cluster: they are our children, so `down` reaps
# them rather than leaving zombies for the host's PID 1.
_launchers: dict[str, list[subprocess.Popen[bytes]]] = {}


@dataclass(frozen=True)
class _Init:
    """A node's init as the state file records it; the start time tells a reused pid apart."""

    address: str
    pid: int
    start: int


class LocalNode(Node):
    """A node of a local cluster, reached by entering its init's namespaces."""

    def __init__(self, cluster: str, name: str, init: _Init) -> None:
        self.cluster = cluster
        self.name = name
        self.address = init.address
        self._init = init

    def __repr__(self) -> str:
        return f"LocalNode({self.cluster}/{self.name} at {self.address}, init {self._init.pid})"

    def power_control(self) -> Path | None:
        control = power.layer(self.cluster, self.name).control
        return control if control.exists() else None

    def _run(
        self, user: str, command: list[str], env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[bytes]:
        """Run `command` in the node as `user`, with the node's own environment (never the
        harness's venv or PATH) and Docker's umask; refuses when the init is not running."""
        if _start_time(self._init.pid) != self._init.start:
            raise InfraError(
                f"{self.name} of cluster {self.cluster} is not running "
                f"(its init, pid {self._init.pid}, is gone): take the cluster down"
            )
        argv = [f"--target={self._init.pid}", "--mount", "--uts", "--ipc", "--net", "--pid"]
        argv = ["nsenter", *argv, "--root", "--wd", "--"]
        if user != "root":  # root needs no switch and no lookup: half the cost of a command
            argv += ["/bin/sh", "-c", _AS_USER, "as-user", user]
        env = {**NODE_ENV, "HOSTNAME": self.name, "HOME": "/root", **(env or {})}
        try:
            return subprocess.run(
                [*argv, *command], env=env, umask=0o022, timeout=EXEC_TIMEOUT, **kwargs
            )
        except subprocess.TimeoutExpired as exc:
            raise InfraError(f"on {self.name}: {command} ran over {EXEC_TIMEOUT:.0f} s") from exc

    def _shell(self, cmd: str, user: str, env: dict[str, str], detach: bool) -> ExecResult:
        command = ["sh", "-c", _DETACH, "detach", cmd] if detach else ["sh", "-c", cmd]
        done = self._run(
            user,
            command,
            env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        return ExecResult(done.returncode, done.stdout.decode(errors="replace"))

    def _put_file(self, path: str, data: bytes, mode: int, owner: str) -> None:
        q = shell_quote(path)
        # Written inside the node, so its symlinks resolve there and never onto the host; the
        # file is private until it has its mode.
        script = (
            f"mkdir -p -- {shell_quote(posixpath.dirname(path))} && (umask 077 && cat > {q}) "
            f"&& chmod {mode:o} -- {q} && chown -- {shell_quote(owner)}: {q}"
        )
        done = self._run("root", ["sh", "-c", script], input=data, capture_output=True)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise NodeCommandError(
                self.name, f"put_file {path}", ExecResult(done.returncode, output)
            )

    def get(self, path: str, dest: Path) -> bool:
        path = posixpath.normpath(path)
        parent, base = posixpath.split(path)
        # tar inside the node, as the Docker backend's archive: links resolve on the node, and a
        # log that grows while it is read (tar's exit 1) is still copied.
        script = (
            f"[ -e {shell_quote(path)} ] || [ -h {shell_quote(path)} ] || exit {MISSING}; "
            f"cd -- {shell_quote(parent)} && exec tar -cf - -- {shell_quote(base)}"
        )
        # Spool to disk: a data directory or a log may be larger than memory.
        with tempfile.TemporaryFile() as spool:
            done = self._run(
                "root",
                ["sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=spool,
                stderr=subprocess.PIPE,
            )
            if done.returncode == MISSING:
                return False
            if done.returncode not in (0, 1):
                result = ExecResult(done.returncode, done.stderr.decode(errors="replace"))
                raise NodeCommandError(self.name, f"get {path}", result)
            spool.seek(0)
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=spool) as tar:
                tar.extractall(dest, filter=local_owner)
        return True

    def logs(self) -> str:
        log = CLUSTERS_DIR / self.cluster / self.name / "init.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def endpoint(self, port: int) -> tuple[str, int]:
        # The host has an address on the cluster's network: every port is reachable as it is.
        return (self.address, port)


class LocalBackend(Backend):
    """Clusters as namespaces on this machine; needs root, util-linux and iproute2."""

    name = "local"
    offers_power = True
    max_nodes = 253  # the addresses of its /24

    def __init__(
        self,
        image_spec: ImageSpec = NODE_IMAGE,
        *,
        console: Console | None = None,
        power: bool = False,
    ) -> None:
        self.power = power
        # Checked now so that a machine that cannot do it is a clear BadInput before any work.
        if os.geteuid() != 0:
            raise BadInput("the local backend needs root (namespaces, mounts, veths)")
        if missing := [t for t in ("unshare", "nsenter", "ip") if shutil.which(t) is None]:
            raise BadInput(
                f"the local backend needs {', '.join(missing)}: install util-linux and iproute2"
            )
        self._spec = image_spec
        self._console = console

    def rootfs(self, spec: ImageSpec | None = None) -> Path:
        """The base root filesystem of the nodes (or of `spec`'s), made first if it is missing
        (a minute or more, once)."""
        return ensure_rootfs(spec or self._spec, self._console)

    def _up(
        self, cluster: str, count: int, ports: list[int], image: ImageSpec | None
    ) -> list[Node]:
        """Every port of a node is reachable at its address, so `ports` is only checked."""
        rootfs = self.rootfs(image)
        with _locked(RUN_DIR / ".lock"):
            if cluster in self.clusters():
                raise InfraError(f"cluster {cluster} is already up: take it down first")
            (RUN_DIR / cluster).mkdir(parents=True)
        try:
            with _locked(RUN_DIR / ".lock"):
                subnet = _free_subnet()
                _make_switch(cluster, subnet)
            names = [f"n{i}" for i in range(1, count + 1)]
            _start_nodes(cluster, names, subnet, rootfs, self.power)
        except BaseException:
            # Leave nothing half-made behind; the original error is the one worth reporting.
            self.down(cluster)
            raise
        return self.nodes(cluster)

    def nodes(self, cluster: str) -> list[Node]:
        if not CLUSTER_NAME.fullmatch(cluster):
            return []
        return in_order(
            LocalNode(cluster, name, init) for name, init in _load_state(cluster).items()
        )

    def clusters(self) -> list[str]:
        names = {p.name for d in (RUN_DIR, CLUSTERS_DIR) if d.is_dir() for p in d.iterdir()}
        return sorted(n for n in names if CLUSTER_NAME.fullmatch(n))

    def down(self, cluster: str) -> list[str]:
        if not CLUSTER_NAME.fullmatch(cluster):
            return []
        removed = []
        # Killing an init ends its PID namespace (every process of the node) and with the last
        # process its mount and network namespaces: the overlay and the node's veth go too.
        # Launchers are found by their command line, so even an init that a crashed `up` had not
        # yet recorded is found.
        launchers = _find_launchers(cluster)
        for pid in launchers:
            _kill_init(pid)
        for pid, (name, start) in launchers.items():
            _wait_gone(pid, start, f"{name} of {cluster}")
            removed.append(f"{PREFIX}:{cluster}:{name} (launcher pid {pid})")
        for launcher in _launchers.pop(cluster, []):
            launcher.wait()
        for veth in _host_veths(cluster):
            if _ip("link", "del", veth, check=False) == 0:
                removed.append(f"veth {veth}")
        switch = f"{PREFIX}:{cluster}"
        if (NETNS_DIR / switch).exists() and _ip("netns", "del", switch, check=False) == 0:
            removed.append(f"netns {switch}")
        for directory in (CLUSTERS_DIR / cluster, RUN_DIR / cluster):
            if directory.exists():
                # Unmounts first whatever is mounted below, so the deletion cannot reach through.
                remove_tree(directory)
                removed.append(str(directory))
        # once no node holds them: the power layers (also after a crash)
        removed += [f"power layer {p}" for p in power.unmount_cluster(cluster)]
        return removed


def ensure_rootfs(spec: ImageSpec = NODE_IMAGE, console: Console | None = None) -> Path:
    """The base root filesystem of `spec`, made with the image's debootstrap recipe on first use.

    It is the image's base (same packages, same trimming) as a directory: nodes only ever read it,
    through their overlays."""
    key = f"{spec.base_tag().partition(':')[2]}-{ROOTFS_RECIPE}"
    rootfs = ROOTFS_DIR / key
    if rootfs.is_dir():
        return rootfs
    if shutil.which("debootstrap") is None:
        raise InfraError(
            "the local backend makes its root filesystem with debootstrap, which is not "
            "installed: run `make setup` (or `apt-get install debootstrap`)"
        )
    console = console or Console(stderr=True)
    with _locked(ROOTFS_DIR / ".lock"), console.status(f"making the node rootfs {key}") as status:
        if rootfs.is_dir():  # another process made it while we waited
            return rootfs
        mirror = debian_mirror()
        console.print(f"making the node rootfs {rootfs}: debootstrap {spec.suite} from {mirror}")
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=ROOTFS_DIR))
        try:
            make_rootfs(spec, mirror, scratch / "rootfs", status)
            # Renamed only when complete, so a rootfs that exists is a whole one.
            (scratch / "rootfs").rename(rootfs)
        finally:
            remove_tree(scratch)
        console.print(f"made {rootfs} in {time.monotonic() - started:.0f} s")
    return rootfs


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock across processes: two runs must not take the same subnet or rootfs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _ip(*args: str, check: bool = True, batch: list[str] | None = None) -> int:
    """Run iproute2 (`batch`: several commands in one process); InfraError when `check` fails."""
    argv = ["ip", *args, *(["-batch", "-"] if batch else [])]
    stdin = "\n".join(batch) + "\n" if batch else None
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise InfraError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done.returncode


def _ip_json(*args: str) -> list[dict[str, Any]]:
    done = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout or "[]")


def _free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of SUPERNET that no address or route of the host overlaps (call locked)."""
    used = []
    for link in _ip_json("-4", "addr"):
        for addr in link.get("addr_info", []):
            used.append(ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False))
    for route in _ip_json("-4", "route", "show", "table", "all"):
        if route.get("dst", "default") != "default":
            used.append(ipaddress.ip_network(str(route["dst"]), strict=False))
    for subnet in SUPERNET.subnets(new_prefix=24):
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise InfraError(f"no /24 of {SUPERNET} is free for another local cluster")


def _host_veth(subnet: ipaddress.IPv4Network) -> str:
    """The host's veth of a cluster, named after its subnet (interface names have 15 chars)."""
    return f"hlocal{subnet.network_address.packed[2]}"


def _make_switch(cluster: str, subnet: ipaddress.IPv4Network) -> None:
    """The cluster's bridge in its own netns, and the host's veth into it with the gateway."""
    switch = f"{PREFIX}:{cluster}"
    veth = _host_veth(subnet)
    gateway = subnet.network_address + 1
    _ip("netns", "add", switch)
    _ip(
        batch=[
            f"link add {veth} type veth peer name uplink netns {switch}",
            f"link set {veth} alias {switch}",
            f"addr add {gateway}/{subnet.prefixlen} dev {veth}",
            f"link set {veth} up",
        ]
    )
    _ip(
        "-n",
        switch,
        batch=["link add br0 type bridge", "link set br0 up", "link set uplink master br0 up"],
    )


def _start_nodes(
    cluster: str,
    names: list[str],
    subnet: ipaddress.IPv4Network,
    rootfs: Path,
    with_power: bool = False,
) -> None:
    """Start every node's init at once, then wire each into the switch."""
    addresses = {name: str(subnet.network_address + 2 + i) for i, name in enumerate(names)}
    hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + "".join(
        f"{address}\t{name}\n" for name, address in addresses.items()
    )
    launchers = _launchers.setdefault(cluster, [])
    for name in names:
        directory = CLUSTERS_DIR / cluster / name
        for sub in ("upper/etc", "work", "root"):
            (directory / sub).mkdir(parents=True)
        # In the upper layer, so each node has its own names before its init starts.
        (directory / "upper/etc/hosts").write_text(hosts)
        (directory / "upper/etc/hostname").write_text(f"{name}\n")
        layer = str(power.mount(cluster, name).mount_point) if with_power else ""
        argv = [*_UNSHARE, "/bin/sh", "-c", _INIT, "init", str(rootfs), str(directory), name]
        with open(directory / "init.log", "ab") as log:
            launchers.append(
                subprocess.Popen(
                    [*argv, layer],
                    env=NODE_ENV,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # Its own session: a Ctrl-C meant for the harness must not reach the nodes.
                    start_new_session=True,
                )
            )
    inits = {}
    for name, launcher in zip(names, launchers[-len(names) :], strict=True):
        pid, start = _wait_tini(launcher, cluster, name)
        inits[name] = _Init(addresses[name], pid, start)
    _save_state(cluster, inits)
    switch = f"{PREFIX}:{cluster}"
    wiring = []
    for name, init in inits.items():
        wiring += [
            f"link add {name} type veth peer name eth0 netns {init.pid}",
            f"link set {name} master br0 up",
        ]
    _ip("-n", switch, batch=wiring)
    for init in inits.values():
        _ip_in(
            init.pid,
            [
                "link set lo up",
                f"addr add {init.address}/{subnet.prefixlen} dev eth0",
                "link set eth0 up",
            ],
        )


def _ip_in(pid: int, batch: list[str]) -> None:
    """iproute2 commands in the network namespace of `pid` (node netns have no name)."""
    done = subprocess.run(
        ["nsenter", f"--target={pid}", "--net", "ip", "-batch", "-"],
        input="\n".join(batch) + "\n",
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise InfraError(f"configuring the network of pid {pid} failed: {done.stderr.strip()}")


def _wait_tini(launcher: subprocess.Popen[bytes], cluster: str, name: str) -> tuple[int, int]:
    """The host pid and start time of a node's tini, once the init script has exec'd it."""
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        with suppress(OSError, ValueError):
            (pid,) = map(int, children.read_text().split())
            start = _start_time(pid)
            if Path(f"/proc/{pid}/comm").read_text().strip() == "tini" and start is not None:
                return pid, start
        if launcher.poll() is not None or time.monotonic() > deadline:
            log = (CLUSTERS_DIR / cluster / name / "init.log").read_text(errors="replace")
            raise InfraError(f"{name} of {cluster} did not start: {log.strip()[-500:]}")
        time.sleep(0.01)


def _start_time(pid: int) -> int | None:
    """A process's start time in clock ticks since boot, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def _state(pid: int) -> str:
    """The one-letter state of a process, "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def _find_launchers(cluster: str) -> dict[int, tuple[str, int]]:
    """The running init launchers of a cluster's nodes: pid → (node, start time)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            # [unshare, …, "/bin/sh", "-c", _INIT, "init", rootfs, node directory, node name,
            #  power layer]
            if len(argv) > 5 and argv[0] == b"unshare" and argv[-5] == b"init":
                directory = Path(os.fsdecode(argv[-3]))
                start = _start_time(int(entry.name))
                if directory.parent == CLUSTERS_DIR / cluster and start is not None:
                    found[int(entry.name)] = (os.fsdecode(argv[-2]), start)
    return found


def _kill_init(launcher: int) -> None:
    """SIGKILL a node's init (its launcher then exits), else the launcher, whose death kills it."""
    with suppress(OSError, ValueError):
        (init,) = map(int, Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split())
        os.kill(init, signal.SIGKILL)
        return
    with suppress(ProcessLookupError):
        os.kill(launcher, signal.SIGKILL)


def _wait_gone(pid: int, start: int, what: str) -> None:
    """Wait until a launcher is gone or a zombie: it exits only once its node's PID namespace has
    ended, and whoever reaps it, a zombie holds no namespace."""
    deadline = time.monotonic() + START_TIMEOUT
    while _state(pid) not in ("", "Z") and _start_time(pid) == start:
        if time.monotonic() > deadline:
            raise InfraError(f"{what} does not die (its launcher is pid {pid})")
        time.sleep(0.01)


def _host_veths(cluster: str) -> list[str]:
    return [
        str(link["ifname"])
        for link in _ip_json("link", "show", "type", "veth")
        if link.get("ifalias") == f"{PREFIX}:{cluster}"
    ]


def _save_state(cluster: str, inits: dict[str, _Init]) -> None:
    """Where each node's init is, for `exec` from any process; renamed into place, so a reader
    never sees half a file."""
    path = RUN_DIR / cluster / "state.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({name: asdict(init) for name, init in inits.items()}))
    tmp.rename(path)


def _load_state(cluster: str) -> dict[str, _Init]:
    try:
        state = json.loads((RUN_DIR / cluster / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return {name: _Init(**init) for name, init in state.items()}
