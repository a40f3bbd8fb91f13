"""The node image, built offline: no container registry is needed, only a Debian mirror.

Two layers. The base image is a `debootstrap` of Debian with the packages the nodes need,
imported into the engine as `harness-base:<hash>`; the node image is `docker build` of a small
context directory on top of it, `<name>:<hash>`. Each tag is a hash of its inputs, so an image is
built once and rebuilt only when its packages, suite, recipe or context files change.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import requests
from docker.errors import DockerException, ImageNotFound
from rich.console import Console
from rich.status import Status

from core.errors import BadInput, InfraError

# Bump when the way the base is made changes (trimming, import changes) so old bases are not reused.
BASE_RECIPE = 1
BASE_REPOSITORY = "harness-base"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Generous, because a node command (initdb, a base backup) may run for minutes without output.
API_TIMEOUT = 600
# What the nodes never read (globs in the rootfs): removing it shrinks the image, speeds the import.
TRIM = (
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "var/lib/apt/lists/*",
    "var/cache/apt/*.bin",
    "var/cache/apt/archives/*.deb",
)


@dataclass(frozen=True)
class Wheel:
    """A Python distribution Debian does not ship in the version a kind needs: one wheel from
    PyPI, pinned by its hash, installed into the base without its dependencies, which the
    base's Debian packages provide."""

    requirement: str  # e.g. "patroni==4.1.5"
    file: str
    sha256: str


@dataclass(frozen=True)
class ImageSpec:
    """What a node image is made of: Debian packages (and pinned wheels) for the base, a build
    context on top."""

    name: str
    packages: tuple[str, ...]
    context: Path
    suite: str = "bookworm"
    wheels: tuple[Wheel, ...] = ()

    def base_tag(self) -> str:
        """The base's tag, a hash of everything debootstrap is given (the mirror is not: any
        mirror of the suite yields the same packages) and of the wheels' hashes."""
        recipe: dict[str, object] = {
            "recipe": BASE_RECIPE,
            "suite": self.suite,
            "packages": sorted(self.packages),
        }
        if self.wheels:
            recipe["wheels"] = sorted(w.sha256 for w in self.wheels)
        return f"{BASE_REPOSITORY}:{_digest(json.dumps(recipe, sort_keys=True).encode())}"

    def tag(self) -> str:
        """The node image's tag, a hash of its base and of every file of the context."""
        h = hashlib.sha256(self.base_tag().encode())
        for path in sorted(p for p in self.context.rglob("*") if p.is_file()):
            rel = path.relative_to(self.context).as_posix()
            h.update(f"\0{rel}\0{path.stat().st_mode & 0o777:o}\0".encode())
            h.update(path.read_bytes())
        return f"{self.name}:{h.hexdigest()[:12]}"


NODE_IMAGE = ImageSpec(
    name="harness-node",
    packages=(
        "postgresql-15",
        "python3",
        "python3-psycopg",
        "iproute2",
        "iptables",
        "libfaketime",
        "procps",
        "tini",
        "netcat-openbsd",
        "openssh-server",
        "tarantool",  # the tarantool cluster kind: Debian's 2.6.0, seed 002's qsync
    ),
    context=Path(__file__).parent / "images" / "node",
)

# The manatee cluster kind's nodes: Postgres peers with their sitters (python3-kazoo) and
# ZooKeeper servers (Debian's libzookeeper-java on a headless JRE; the `zookeeper` package
# itself would pull a desktop JRE). An image of its own, built on the kind's first use, so the
# other kinds' image stays as small and as quick to make.
MANATEE_IMAGE = ImageSpec(
    name="harness-manatee",
    packages=(
        *(p for p in NODE_IMAGE.packages if p != "tarantool"),
        "python3-kazoo",
        "libzookeeper-java",
        "openjdk-17-jre-headless",
    ),
    context=NODE_IMAGE.context,
)

# The patroni cluster kind's nodes: Patroni 4 from PyPI (Debian's 3.0.2 has no
# `synchronous_mode: quorum`, which the Patroni project's own Jepsen test runs) on Debian's
# packages of its dependencies (python3-etcd for its etcd3 backend), beside Postgres, and
# Debian's etcd server; the kind's own image, built on first use.
PATRONI_WHEEL = Wheel(
    "patroni==4.1.5",
    "patroni-4.1.5-py3-none-any.whl",
    "7aad8c1539e6c51c269a8005169dd54ddc7668437b7900fa6099d7894e224c84",
)
PATRONI_IMAGE = ImageSpec(
    name="harness-patroni",
    packages=(
        *(p for p in NODE_IMAGE.packages if p != "tarantool"),
        "python3-pip",  # installs the wheel, offline, in the chroot
        "python3-psycopg2",
        "python3-yaml",
        "python3-click",
        "python3-prettytable",
        "python3-dateutil",
        "python3-psutil",
        "python3-urllib3",
        "python3-etcd",
        "etcd-server",
    ),
    context=NODE_IMAGE.context,
    wheels=(PATRONI_WHEEL,),
)

# The autofailover cluster kind's nodes: Debian's pg_auto_failover 2.0 (the monitor's extension
# and pg_autoctl) beside Postgres; an image of its own, built on the kind's first use.
AUTOFAILOVER_IMAGE = ImageSpec(
    name="harness-autofailover",
    packages=(
        *(p for p in NODE_IMAGE.packages if p != "tarantool"),
        "postgresql-15-auto-failover",
        "pg-auto-failover-cli",
    ),
    context=NODE_IMAGE.context,
)

# The repmgr cluster kind's nodes: Debian's repmgr 5.3 (repmgr and repmgrd, and the extension
# their metadata lives in) beside Postgres; an image of its own, built on the kind's first use.
REPMGR_IMAGE = ImageSpec(
    name="harness-repmgr",
    packages=(
        *(p for p in NODE_IMAGE.packages if p != "tarantool"),
        "postgresql-15-repmgr",
    ),
    context=NODE_IMAGE.context,
)


# Every kind's image, for `harness cluster image --all` (the test suite builds them up front).
ALL_IMAGES = (NODE_IMAGE, MANATEE_IMAGE, PATRONI_IMAGE, AUTOFAILOVER_IMAGE, REPMGR_IMAGE)


def engine_client(base_url: str | None = None) -> docker.DockerClient:
    """A client for the engine that answers, or BadInput saying how to get one.

    The one place that opens the engine, so the image builder and the backend fail alike."""
    try:
        client = (
            docker.DockerClient(base_url=base_url, timeout=API_TIMEOUT)
            if base_url
            else docker.from_env(timeout=API_TIMEOUT)
        )
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise BadInput(
            f"cannot reach the Docker engine ({exc}): start it, e.g. `systemctl start docker`, "
            "or pick another --backend"
        ) from exc
    return client


def ensure_image(
    spec: ImageSpec,
    console: Console | None = None,
    *,
    client: docker.DockerClient | None = None,
) -> str:
    """Return the tag of the node image of `spec`, building whichever layer is missing."""
    client = client or engine_client()
    tag = spec.tag()
    if _exists(client, tag):
        return tag
    console = console or Console(stderr=True)
    with _build_lock(console), console.status(f"building {tag}") as status:
        # Another process may have built it while we waited for the lock.
        if _exists(client, tag):
            return tag
        base = spec.base_tag()
        if not _exists(client, base):
            _build_base(client, spec, base, console, status)
        _build_node(client, spec, base, tag, console, status)
    return tag


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


@contextmanager
def _build_lock(console: Console) -> Iterator[None]:
    """Serialise builds across processes: two runs starting at once must not debootstrap twice."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "image-build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with console.status("waiting for another process that is building the node image"):
                fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_base(
    client: docker.DockerClient, spec: ImageSpec, tag: str, console: Console, status: Status
) -> None:
    """debootstrap the suite with the packages into a scratch directory, trim it, import it."""
    if shutil.which("debootstrap") is None:
        raise InfraError(
            "building the node image needs debootstrap, which is not installed: "
            "run `make setup` (or `apt-get install debootstrap`)"
        )
    if os.geteuid() != 0:
        raise InfraError("building the node image runs debootstrap, which needs root")
    mirror = debian_mirror()
    started = time.monotonic()
    console.print(f"building the base image {tag}: debootstrap {spec.suite} from {mirror}")
    scratch = Path(tempfile.mkdtemp(prefix="harness-rootfs-", dir="/var/tmp"))
    try:
        rootfs = scratch / "rootfs"
        make_rootfs(spec, mirror, rootfs, status)
        status.update(f"packing {tag}")
        archive = scratch / "rootfs.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."],
            check=True,
            capture_output=True,
        )
        status.update(f"importing {tag}")
        repository, _, version = tag.partition(":")
        client.api.import_image(
            src=str(archive),
            repository=repository,
            tag=version,
            changes=[f"LABEL harness.image={BASE_REPOSITORY}"],
        )
    except subprocess.CalledProcessError as exc:
        raise InfraError(f"packing the base image failed: {exc.stderr.decode().strip()}") from exc
    except DockerException as exc:
        raise InfraError(f"importing the base image failed: {exc}") from exc
    finally:
        remove_tree(scratch)
    console.print(f"built {tag} in {time.monotonic() - started:.0f} s")


def debian_mirror() -> str:
    """The Debian mirror debootstrap fetches from: $HARNESS_DEBIAN_MIRROR, else deb.debian.org."""
    return os.environ.get("HARNESS_DEBIAN_MIRROR", DEFAULT_MIRROR)


def make_rootfs(spec: ImageSpec, mirror: str, rootfs: Path, status: Status) -> None:
    """Make `rootfs` (a path that does not exist yet) a Debian root of `spec`: debootstrap of its
    suite with its packages from `mirror`, without what the nodes never read (TRIM).

    The one recipe behind the node image's base and the local backend's node root, so the two
    stay the same; needs root and debootstrap. The caller deletes a half-made root with
    `remove_tree`, since an interrupted debootstrap leaves /proc and /sys mounted in it."""
    _debootstrap(spec, mirror, rootfs, status)
    for wheel in spec.wheels:
        status.update(f"installing {wheel.requirement} from PyPI")
        _install_wheel(fetch_wheel(wheel), rootfs)
    for pattern in TRIM:
        for path in rootfs.glob(pattern):
            _remove(path)


def _debootstrap(spec: ImageSpec, mirror: str, rootfs: Path, status: Status) -> None:
    """Run debootstrap, showing its `I:` progress lines; keep its last lines for the error."""
    cmd = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(spec.packages)}",
        spec.suite,
        str(rootfs),
        mirror,
    ]
    tail: collections.deque[str] = collections.deque(maxlen=15)
    env = {**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
    # Its own process group, so that on an interrupt all of it (dpkg in the chroot too) is
    # killed before the scratch tree is deleted under it.
    with subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                tail.append(line)
                if line.startswith(("I: ", "W: ")):
                    status.update(f"debootstrap: {line[3:]}")
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if proc.returncode != 0:
        raise InfraError(
            f"debootstrap of {spec.suite} from {mirror} failed (exit {proc.returncode}):\n"
            + "\n".join(tail)
        )


def cache_dir() -> Path:
    """The harness's cache on this machine (image build lock, downloaded wheels)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness"


def fetch_wheel(wheel: Wheel) -> Path:
    """The wheel's file, downloaded once from PyPI into the cache and checked against its pinned
    hash, so that an image never holds what the pin does not name."""
    path = cache_dir() / "wheels" / wheel.file
    if not (path.exists() and _sha256(path) == wheel.sha256):
        path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--dest", str(path.parent), wheel.requirement]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            raise InfraError(
                f"downloading {wheel.requirement} from PyPI failed: "
                f"{(done.stderr or done.stdout).strip()[-400:]}"
            )
    if _sha256(path) != wheel.sha256:
        path.unlink()
        raise InfraError(
            f"{wheel.file} from PyPI does not have the pinned hash {wheel.sha256}: "
            "the image is not built from a file the harness did not pin"
        )
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _install_wheel(path: Path, rootfs: Path) -> None:
    """pip in the chroot installs the wheel into /usr/local, offline and without dependencies."""
    inside = Path("/tmp") / path.name
    shutil.copy(path, rootfs / inside.relative_to("/"))
    cmd = ["chroot", str(rootfs), "python3", "-m", "pip", "install", "--no-deps", "--no-index",
           "--break-system-packages", "--no-cache-dir", str(inside)]  # fmt: skip
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise InfraError(
            f"installing {path.name} in the image failed: {exc.stderr.strip()}"
        ) from exc
    finally:
        (rootfs / inside.relative_to("/")).unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def remove_tree(tree: Path) -> None:
    """Delete a directory tree, first unmounting whatever is mounted below it (an interrupted
    debootstrap leaves /proc and /sys mounted): deleting through a mount would reach the host's
    files."""
    prefix = str(tree) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    shutil.rmtree(tree)


def _build_node(
    client: docker.DockerClient,
    spec: ImageSpec,
    base: str,
    tag: str,
    console: Console,
    status: Status,
) -> None:
    """`docker build` the context on the base, following its steps; never pulls."""
    started = time.monotonic()
    try:
        for chunk in client.api.build(
            path=str(spec.context),
            tag=tag,
            buildargs={"BASE": base},
            pull=False,
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in chunk:
                raise InfraError(f"building {tag} failed: {chunk['error'].strip()}")
            line = chunk.get("stream", "").strip()
            if line.startswith("Step "):
                status.update(f"building {tag}: {line}")
    except DockerException as exc:
        raise InfraError(f"building {tag} failed: {exc}") from exc
    console.print(f"built {tag} in {time.monotonic() - started:.0f} s")
