"""What every cluster kind does on its nodes: start a daemon once, run it under the node's faked
clock, wait until something happens, and list its nodes for a client that follows the primary."""

from __future__ import annotations

import time
from collections.abc import Callable

from clusters.backend import Node, shell_quote
from core.endpoint import Endpoint, Protocol
from core.errors import InfraError

# The clock nemesis moves a node's clock by rewriting CLOCK_FILE, which libfaketime, preloaded
# into every cluster process, reads on each clock call (FAKETIME_NO_CACHE: otherwise it caches
# for ~10 s). libfaketime fakes CLOCK_MONOTONIC too; FAKETIME_DONT_FAKE_MONOTONIC would be closer
# to a real clock step, but in 0.9.10 it breaks absolute monotonic sleeps (EINVAL).
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CLOCK_FILE = "/var/lib/harness/clock-offset"


def failover_endpoint(
    nodes: list[Node],
    port: int,
    dbname: str,
    user: str,
    *,
    two_phase: bool = False,
    protocol: Protocol = Protocol.POSTGRES,
) -> Endpoint:
    """One endpoint listing `nodes`, for a cluster that fails over: a client keeps to the one
    that takes writes (`target_session_attrs=read-write`), as an application would, and each
    operation records the node behind the host it went to."""
    addresses = [(n.name, *n.endpoint(port)) for n in nodes]
    return Endpoint(
        ",".join(name for name, _, _ in addresses),
        ",".join(host for _, host, _ in addresses),
        ",".join(str(p) for _, _, p in addresses),
        dbname,
        user,
        "read-write",
        tuple((f"{host}:{p}", name) for name, host, p in addresses),
        two_phase,
        protocol,
    )


def start_once(node: Node, running: str, cmd: str, log: str) -> None:
    """Start `cmd` detached on the node, appending its output to `log`, unless a process whose
    command line matches the pattern `running` is already there (write it with a bracket, as
    "walkeeper [c]ompute", so that pgrep does not find the shell that runs it)."""
    if node.exec(f"pgrep -f {shell_quote(running)}", check=False).code == 0:
        return
    node.exec(f"mkdir -p $(dirname {log}) && exec {cmd} >> {log} 2>&1", detach=True)


def under_faketime(cmd: str, *, monotonic: bool = True) -> str:
    """`cmd` with libfaketime preloaded and reading the node's clock file.

    Put it after the privilege drop (`runuser -u USER -- ` + this): preloaded into runuser, it
    would create its semaphore as root, and the dropped process then fails to open it. With
    `monotonic` false only the wall clock moves, as a real clock step would."""
    env = {
        "LD_PRELOAD": FAKETIME_LIB,
        "FAKETIME_TIMESTAMP_FILE": CLOCK_FILE,
        "FAKETIME_NO_CACHE": "1",
    }
    if not monotonic:
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    return "env " + " ".join(f"{k}={shell_quote(v)}" for k, v in env.items()) + " " + cmd


def ensure_clock_file(node: Node) -> None:
    """Create the node's clock file at offset zero ("+0", libfaketime's relative format) unless it
    exists: a restart during a clock fault must not undo the fault."""
    node.exec(
        f"test -e {CLOCK_FILE} || {{ mkdir -p $(dirname {CLOCK_FILE}) && echo +0 > {CLOCK_FILE}; }}"
        f" && chmod 644 {CLOCK_FILE}"
    )


def wait_until(what: str, probe: Callable[[], bool], timeout: float, every: float = 0.5) -> None:
    """Poll `probe` until it is true; an infrastructure error names what never happened."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except Exception as e:
            last = e
        time.sleep(every)
    raise InfraError(f"{what} did not happen within {timeout:g}s" + (f": {last}" if last else ""))
