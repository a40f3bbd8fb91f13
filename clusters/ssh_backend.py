"""Nodes as real hosts over SSH (paramiko): machines that already exist, claimed for a cluster.

The hosts are given in order (`--node [root@]host[:port][,PORT=REACH…]`, repeatable, or a nodes
file with one such spec per line) and logged in to as root, by key, with host keys checked against
known_hosts unless the user opts out. `up` claims the first N of them by writing
/var/lib/harness/cluster (the cluster's name and the node's, n1…nN); that file is the only record,
so `nodes`, `clusters` and `down` work from any control machine, also after a crash. `up` also
adds a managed block to each host's /etc/hosts so that n1…nN resolve on every host; a host's
address there is the one it received our SSH connection on ($SSH_CONNECTION), which is reachable
by its peers whenever the control machine reaches the hosts directly.

Everything the harness starts on a host carries HARNESS_CLUSTER in its environment; `down` stops
those processes, those whose command line names /var/lib/harness (the daemons' data directories)
and their descendants, and nothing else; then it removes the hosts block, the harness's
directories and last the claim, so an interrupted `down` can simply be run again.

`endpoint(port)` is the host and the port itself: the control machine reaches the hosts directly.
Where it does not (a forwarded or published port), the spec maps it: `127.0.0.1:2222,5432=15432`.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import stat
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import paramiko

from clusters.backend import (
    LOG_DIR,
    Backend,
    ExecResult,
    Node,
    NodeCommandError,
    in_order,
    shell_quote,
)
from core.errors import BadInput, InfraError

if TYPE_CHECKING:
    from clusters.image import ImageSpec

HARNESS_DIR = "/var/lib/harness"
CLAIM_FILE = f"{HARNESS_DIR}/cluster"
DETACHED_LOG = f"{LOG_DIR}/detached.log"
# In the environment of every command a node runs: the mark by which `down` knows what is ours.
MARKER = "HARNESS_CLUSTER"
HOSTS_FILE = "/etc/hosts"
HOSTS_BEGIN = "# BEGIN harness nodes: managed by the harness, removed by `harness cluster down`"
HOSTS_END = "# END harness nodes"
CONNECT_TIMEOUT = 10.0
KEEPALIVE = 15  # seconds: notices a host that vanished while a command runs
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL when `down` stops processes
LOG_TAIL_LINES = 200
DEFAULT_KNOWN_HOSTS = (Path("/etc/ssh/ssh_known_hosts"), Path("~/.ssh/known_hosts").expanduser())
# A command line that sets the marker or names the harness's directory.
_OWNED_ARGS = re.compile(rf"(^|\s){MARKER}=|{HARNESS_DIR}/")
_SPEC_FORMAT = "expected [user@]host[:port][,PORT=REACH…]"
T = TypeVar("T")


@dataclass(frozen=True)
class SshHost:
    """One host as the user listed it, logged in to as root; `ports` maps a node port to where
    the control machine reaches it on the same host (absent: the port itself)."""

    host: str
    port: int = 22
    ports: Mapping[int, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_host(spec: str) -> SshHost:
    """Parse `[user@]host[:port][,PORT=REACH…]` (an IPv6 address with a port goes in [])."""
    address, *mappings = [part.strip() for part in spec.strip().split(",")]
    user, _, hostport = address.rpartition("@")
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest or "22"
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    else:  # a bare name, IPv4 or IPv6 address without a port
        host, port = hostport, "22"
    ports = {}
    for mapping in mappings:
        inner, _, reach = mapping.partition("=")
        ports[_port(inner, spec)] = _port(reach, spec)
    if not host or any(c.isspace() for c in host):
        raise BadInput(f"bad ssh node {spec!r}: {_SPEC_FORMAT}")
    if user and user != "root":
        raise BadInput(
            f"ssh node {spec!r} logs in as {user}, but the harness needs root on its nodes "
            "(iptables, /etc/hosts, its daemons): log in as root"
        )
    return SshHost(host, _port(port, spec), ports)


def _port(text: str, spec: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise BadInput(f"bad ssh node {spec!r}: {text!r} is not a TCP port ({_SPEC_FORMAT})")
    return int(text)


def read_nodes_file(path: Path) -> list[str]:
    """The host specs of a nodes file: one per line, `#` starts a comment."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInput(f"cannot read the nodes file {path}: {exc.strerror}") from exc
    lines = (line.partition("#")[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


class _UnknownHostKey(Exception):
    """Raised by the host-key policy; becomes a BadInput that says how to fix it."""

    def __init__(self, key: paramiko.PKey) -> None:
        super().__init__(key.fingerprint)
        self.key = key


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise _UnknownHostKey(key)


@dataclass(frozen=True)
class _Auth:
    """How every connection logs in and checks host keys (shared by a backend's hosts)."""

    key: Path | None
    known_hosts: tuple[Path, ...]
    insecure: bool

    def describe_known_hosts(self) -> str:
        return " or ".join(str(p) for p in self.known_hosts) or "any known_hosts file"


class _Connection:
    """The one SSH client of a host, opened on first use and again after it failed."""

    def __init__(self, host: SshHost, auth: _Auth) -> None:
        self.host = host
        self._auth = auth
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    def run(self, command: str) -> ExecResult:
        """Run a command line through the login shell; stdout and stderr combined.

        The code is -1 when the command ended by a signal (SSH then sends no exit code)."""
        channel = self._open(lambda t: _start(t, command))
        with channel:
            chunks = []
            while data := channel.recv(65536):
                chunks.append(data)
            code = channel.recv_exit_status()
            if code == -1 and not channel.get_transport().is_active():
                raise InfraError(f"lost the SSH connection to {self.host} while running a command")
        return ExecResult(code, b"".join(chunks).decode(errors="replace"))

    def run_checked(self, command: str) -> str:
        result = self.run(command)
        if result.code != 0:
            raise NodeCommandError(str(self.host), command, result)
        return result.output

    @contextmanager
    def sftp(self, doing: str) -> Iterator[paramiko.SFTPClient]:
        """An SFTP session for one operation; failures other than a missing file say `doing`."""
        client = self._open(paramiko.SFTPClient.from_transport)
        try:
            with client:
                yield client
        except FileNotFoundError:
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise InfraError(f"{doing} on {self.host} failed: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _open(self, opener: Callable[[paramiko.Transport], T]) -> T:
        """Open a channel on the connection; a connection that died or hangs is replaced once
        (the command has not started when opening fails, so trying again is safe)."""
        transport = self._transport()
        try:
            return opener(transport)
        except paramiko.ChannelException as exc:
            # The host refused the session (too many at once, say): the connection is fine.
            raise InfraError(f"{self.host} refused an SSH session: {exc}") from exc
        except (OSError, EOFError, paramiko.SSHException):
            with self._lock:
                # Unless another thread has already replaced it.
                if self._client is not None and self._client.get_transport() is transport:
                    self._client.close()
                    self._client = None
        try:
            return opener(self._transport())
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise InfraError(f"lost the SSH connection to {self.host}: {exc}") from exc

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                if self._client is not None:
                    self._client.close()
                self._client = self._connect()
                transport = self._client.get_transport()
            assert transport is not None
            return transport

    def _connect(self) -> paramiko.SSHClient:
        """Log in, turning each way it can fail into one sentence that names the host."""
        auth, host = self._auth, self.host
        client = paramiko.SSHClient()
        if auth.insecure:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        else:
            for path in auth.known_hosts:
                try:
                    client.load_system_host_keys(str(path))
                except OSError as exc:
                    raise BadInput(f"cannot read the known_hosts file {path}: {exc}") from exc
            client.set_missing_host_key_policy(_RejectUnknown())
        try:
            client.connect(
                host.host,
                host.port,
                username="root",
                key_filename=str(auth.key) if auth.key else None,
                allow_agent=auth.key is None,
                look_for_keys=auth.key is None,
                timeout=CONNECT_TIMEOUT,
                banner_timeout=CONNECT_TIMEOUT,
                auth_timeout=CONNECT_TIMEOUT,
            )
        except _UnknownHostKey as exc:
            client.close()
            raise BadInput(
                f"the host key of {host} ({exc.key.get_name()} {exc.key.fingerprint}) is not in "
                f"{auth.describe_known_hosts()}: add it there after checking it, "
                "or pass --ssh-insecure to accept any host key"
            ) from None
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise BadInput(
                f"the host key of {host} ({exc.key.get_name()} {exc.key.fingerprint}) does not "
                f"match the one in {auth.describe_known_hosts()} "
                f"({exc.expected_key.fingerprint}): refusing to connect, since the host was "
                "reinstalled or someone is in between"
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            how = f"the key {auth.key}" if auth.key else "the SSH agent or ~/.ssh keys"
            raise BadInput(
                f"cannot log in to {host} with {how} ({exc}): pass --ssh-key with a key that "
                "the host's authorized_keys accepts"
            ) from None
        except (OSError, EOFError, paramiko.SSHException) as exc:
            client.close()
            raise InfraError(f"cannot reach {host} over SSH: {_reason(exc)}") from None
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE)
        return client


def _start(transport: paramiko.Transport, command: str) -> paramiko.Channel:
    channel = transport.open_session(timeout=CONNECT_TIMEOUT)
    channel.set_combine_stderr(True)
    channel.exec_command(command)
    return channel


def _reason(exc: BaseException) -> str:
    """The cause of a connection failure in a few words."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        causes = {e.strerror or str(e) for e in exc.errors.values()}
        return ", ".join(sorted(causes)).lower()
    if isinstance(exc, TimeoutError):
        return f"no answer within {CONNECT_TIMEOUT:g} s"
    return str(exc) or type(exc).__name__


class SshNode(Node):
    """A claimed host; commands run as root (or through runuser) in an SSH session."""

    def __init__(self, name: str, cluster: str, connection: _Connection) -> None:
        self.name = name
        self._cluster = cluster
        self._conn = connection

    def __repr__(self) -> str:
        return f"SshNode({self.name} on {self._conn.host})"

    def _shell(self, cmd: str, user: str, env: dict[str, str], detach: bool) -> ExecResult:
        # runuser stays the parent of the command, holding it in its command line: against
        # Node.exec's contract, `signal` matches it too (an expected failure of the contract
        # test test_signal_finds_the_detached_command_and_no_wrapper[postgres]).
        words = [] if user == "root" else ["runuser", "-u", shell_quote(user), "--"]
        variables = {MARKER: self._cluster, **env}
        words += ["env", *(shell_quote(f"{k}={v}") for k, v in variables.items())]
        words += ["sh", "-c", shell_quote(cmd)]
        if detach:
            # Out of the session's pipes, so the session ends and the command goes on.
            line = (
                f"mkdir -p {LOG_DIR} && {{ nohup {' '.join(words)} "
                f">>{DETACHED_LOG} 2>&1 </dev/null & }}"
            )
        else:
            # `exec`: no login shell stays behind whose command line holds `cmd`, where
            # `pgrep -f` (Node.signal) would find and signal it.
            line = "exec " + " ".join(words)
        return self._conn.run(line)

    def _put_file(self, path: str, data: bytes, mode: int, owner: str) -> None:
        self.exec(f"mkdir -p -- {shell_quote(posixpath.dirname(path))}")
        with self._conn.sftp(f"writing {path}") as sftp:
            sftp.putfo(io.BytesIO(data), path)
            sftp.chmod(path, mode)
        if owner != "root":
            self.exec(f"chown -- {shell_quote(owner)}: {shell_quote(path)}")

    def get(self, path: str, dest: Path) -> bool:
        with self._conn.sftp(f"copying {path}") as sftp:
            try:
                attr = sftp.stat(path)
            except FileNotFoundError:
                return False
            dest.mkdir(parents=True, exist_ok=True)
            _copy(sftp, path, attr, dest / posixpath.basename(path.rstrip("/")))
        return True

    def logs(self) -> str:
        """The last lines of every file under /var/log/harness, each under a `==> file <==`
        header: a host has no container log, and this is where the harness's daemons and
        detached commands write."""
        return self._conn.run(
            f"find {LOG_DIR} -type f -exec tail -v -n {LOG_TAIL_LINES} {{}} + 2>/dev/null"
        ).output

    def endpoint(self, port: int) -> tuple[str, int]:
        host = self._conn.host
        return host.host, host.ports.get(port, port)


def _copy(
    sftp: paramiko.SFTPClient, remote: str, attr: paramiko.SFTPAttributes, local: Path
) -> None:
    """Copy a directory tree's directories and regular files (sockets, links and the like are
    left out); a file that vanishes meanwhile (a rotated log, a recycled WAL segment) is skipped."""
    mode = attr.st_mode or 0
    if stat.S_ISDIR(mode):
        local.mkdir(exist_ok=True)
        with suppress(FileNotFoundError):
            for entry in sftp.listdir_attr(remote):
                _copy(sftp, posixpath.join(remote, entry.filename), entry, local / entry.filename)
    elif stat.S_ISREG(mode):
        with suppress(FileNotFoundError):
            sftp.get(remote, str(local))
            # Keep the mode, but the files must stay readable and removable by us.
            os.chmod(local, mode & 0o777 | 0o600)


@dataclass(frozen=True)
class _Claim:
    cluster: str
    node: str


class SshBackend(Backend):
    """Clusters on a fixed, ordered list of hosts that are reached over SSH as root."""

    name = "ssh"

    def __init__(
        self,
        hosts: Sequence[SshHost],
        *,
        key: Path | None = None,
        known_hosts: Path | None = None,
        insecure: bool = False,
    ) -> None:
        if not hosts:
            raise BadInput("the ssh backend needs hosts: pass --node HOST or --nodes-file FILE")
        if len({(h.host, h.port) for h in hosts}) != len(hosts):
            raise BadInput("an ssh host is listed twice: each node needs a host of its own")
        if key is not None and not key.is_file():
            raise BadInput(f"the SSH key {key} does not exist")
        if known_hosts is not None and not known_hosts.is_file():
            raise BadInput(f"the known_hosts file {known_hosts} does not exist")
        files = (
            (known_hosts,) if known_hosts else tuple(p for p in DEFAULT_KNOWN_HOSTS if p.is_file())
        )
        auth = _Auth(key, files, insecure)
        self._conns = [_Connection(h, auth) for h in hosts]

    @classmethod
    def from_options(cls, **given: Any) -> SshBackend:
        """The backend as the command line describes it: `--node` specs (`nodes`), then the
        file's (`nodes_file`); `ssh_key`, `known_hosts`, `ssh_insecure`."""
        nodes_file = given.get("nodes_file")
        specs = [*given.get("nodes", ()), *(read_nodes_file(nodes_file) if nodes_file else [])]
        return cls(
            [parse_host(s) for s in specs],
            key=given.get("ssh_key"),
            known_hosts=given.get("known_hosts"),
            insecure=bool(given.get("ssh_insecure")),
        )

    def close(self) -> None:
        """Close every connection (paramiko's threads may otherwise delay the exit)."""
        for conn in self._conns:
            conn.close()

    def _up(
        self, cluster: str, count: int, ports: list[int], image: ImageSpec | None
    ) -> list[Node]:
        """The hosts are what they are: `image` is not built here, and its packages must be
        installed on them beforehand (docs/ says which, per cluster kind)."""
        if count > len(self._conns):
            raise BadInput(
                f"cluster {cluster} needs {count} nodes but the ssh backend has "
                f"{len(self._conns)} host{'s' if len(self._conns) != 1 else ''}: "
                "list more with --node or --nodes-file"
            )
        chosen = self._conns[:count]
        claimed: list[_Connection] = []
        try:
            for i, conn in enumerate(chosen, start=1):
                self._claim(conn, _Claim(cluster, f"n{i}"))
                claimed.append(conn)
            addresses = [_peer_address(conn) for conn in chosen]
            block = [f"{addr} n{i}" for i, addr in enumerate(addresses, start=1)]
            for conn in chosen:
                _write_hosts_block(conn, block)
        except BaseException:
            # Release only what this call claimed; the original error is the one to report.
            for conn in claimed:
                with suppress(Exception):
                    _release(conn)
            raise
        return [SshNode(f"n{i}", cluster, conn) for i, conn in enumerate(chosen, start=1)]

    def nodes(self, cluster: str) -> list[Node]:
        return in_order(
            SshNode(claim.node, cluster, conn)
            for conn, claim in self._claims()
            if claim is not None and claim.cluster == cluster
        )

    def clusters(self) -> list[str]:
        return sorted({claim.cluster for _, claim in self._claims() if claim is not None})

    def down(self, cluster: str) -> list[str]:
        removed = []
        for conn, claim in self._claims():
            if claim is not None and claim.cluster == cluster:
                _release(conn)
                removed.append(f"{claim.node} ({conn.host})")
        return removed

    def _claims(self) -> list[tuple[_Connection, _Claim | None]]:
        return [(conn, _read_claim(conn)) for conn in self._conns]

    @staticmethod
    def _claim(conn: _Connection, claim: _Claim) -> None:
        """Write the claim file unless one exists (`set -C`: atomic against another harness)."""
        result = conn.run(
            f"mkdir -p {HARNESS_DIR} {LOG_DIR} && (set -C && printf '%s\\n' "
            f"cluster={claim.cluster} node={claim.node} > {CLAIM_FILE})"
        )
        if result.code == 0:
            return
        held = _read_claim(conn)
        if held is None:
            raise InfraError(f"cannot claim {conn.host}: {result.output.strip()}")
        if held.cluster == claim.cluster:
            raise InfraError(f"cluster {claim.cluster} is already up: take it down first")
        raise InfraError(
            f"{conn.host} is already {held.node} of cluster {held.cluster}: "
            f"take that cluster down first or list other hosts"
        )


def _read_claim(conn: _Connection) -> _Claim | None:
    result = conn.run(f"cat {CLAIM_FILE}")
    if result.code != 0:
        return None
    fields = dict(line.partition("=")[::2] for line in result.output.splitlines())
    if not fields.get("cluster") or not re.fullmatch(r"n[1-9][0-9]*", fields.get("node", "")):
        raise InfraError(
            f"{conn.host} has a claim the harness cannot read in {CLAIM_FILE}: "
            f"{result.output.strip()!r}"
        )
    return _Claim(fields["cluster"], fields["node"])


def _peer_address(conn: _Connection) -> str:
    """The address the host took our connection on, which its peers reach it at too."""
    fields = conn.run_checked("echo $SSH_CONNECTION").split()
    if len(fields) != 4:
        raise InfraError(f"{conn.host} did not say which address it was reached at")
    return fields[2]


def _write_hosts_block(conn: _Connection, lines: list[str] | None) -> None:
    """Replace the managed block of /etc/hosts (None: remove it). Rewritten in place, not
    renamed, because in a container /etc/hosts is a mount point."""
    with conn.sftp(f"editing {HOSTS_FILE}") as sftp:
        with sftp.open(HOSTS_FILE, "r") as f:
            text = f.read().decode()
        new = without_hosts_block(text)
        if lines:
            new += "\n".join([HOSTS_BEGIN, *lines, HOSTS_END]) + "\n"
        if new != text:
            with sftp.open(HOSTS_FILE, "w") as f:
                f.write(new.encode())


def without_hosts_block(text: str) -> str:
    """`text` without the harness's block (and ending in a newline, ready for a new one)."""
    kept, inside = [], False
    for line in text.splitlines():
        if line == HOSTS_BEGIN:
            inside = True
        elif line == HOSTS_END and inside:
            inside = False
        elif not inside:
            kept.append(line)
    return "".join(line + "\n" for line in kept)


def owned_processes(ps_output: str, marked: set[int]) -> tuple[list[int], list[int]]:
    """From `ps -eo pid=,ppid=,args=`: the roots and every process in their trees.

    Roots are the processes with MARKER in their environment (`marked`; root may not read the
    environment of another user's process where it lacks CAP_SYS_PTRACE, as in a container),
    those whose command line sets it (the `runuser … env MARKER=…` that a user's command runs
    under) and those whose command line names HARNESS_DIR (the daemons' data directories)."""
    children: dict[int, list[int]] = defaultdict(list)
    roots = set()
    for line in ps_output.splitlines():
        pid, ppid, *args = line.split(None, 2)
        children[int(ppid)].append(int(pid))
        if int(pid) in marked or (args and re.search(_OWNED_ARGS, args[0])):
            roots.add(int(pid))
    trees: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in trees:
            trees.add(pid)
            todo.extend(children[pid])
    return sorted(roots), sorted(trees)


def _stop_processes(conn: _Connection) -> None:
    """Stop what the harness started: SIGCONT (a paused process cannot die gracefully), SIGTERM
    to the roots, SIGKILL to whatever is left after the grace; again for late children."""
    for attempt in range(4):
        listing = conn.run_checked(
            "ps -eo pid=,ppid=,args=; echo ---; "
            # [x]: this command line must not itself look like one that sets the marker.
            f"grep -lzs '^{MARKER[:-1]}[{MARKER[-1]}]=' /proc/[0-9]*/environ || true"
        )
        ps_output, _, marks = listing.partition("---\n")
        marked = {int(p.split("/")[2]) for p in marks.split() if p.count("/") == 3}
        roots, everything = owned_processes(ps_output, marked)
        if not everything:
            return
        if attempt == 3:
            raise InfraError(f"processes {everything} on {conn.host} survive SIGKILL")
        grace = STOP_GRACE if attempt == 0 else 1.0
        pids, first = " ".join(map(str, everything)), " ".join(map(str, roots))
        conn.run(
            f"kill -CONT {pids} 2>/dev/null; kill -TERM {first} 2>/dev/null; "
            f"i=0; while [ $i -lt {int(grace * 10)} ]; do alive=; "
            f'for p in {pids}; do kill -0 $p 2>/dev/null && alive="$alive $p"; done; '
            '[ -z "$alive" ] && exit 0; sleep 0.1; i=$((i+1)); done; '
            "kill -KILL $alive 2>/dev/null; exit 0"
        )


def _release(conn: _Connection) -> None:
    """Give a host back as it was before the claim; the claim itself goes last."""
    _stop_processes(conn)
    _write_hosts_block(conn, None)
    # libfaketime leaves its shared memory behind per process; those of dead processes go.
    conn.run_checked(
        "for f in /dev/shm/faketime_shm_* /dev/shm/sem.faketime_sem_*; do "
        '[ -e "$f" ] || continue; [ -d "/proc/${f##*_}" ] || rm -f -- "$f"; done; '
        # a state folder that is a mount (a disk of its own) is emptied, and stays
        f"rm -rf -- {LOG_DIR}; if [ -d {HARNESS_DIR} ]; then "
        f"find {HARNESS_DIR} -mindepth 1 -delete; rmdir {HARNESS_DIR} 2>/dev/null; fi; true"
    )
