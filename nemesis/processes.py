"""Finding a cluster's processes on a node and signalling them with all their descendants.

A process is matched by its command line against the cluster kind's pattern (as `pgrep -f`),
but the match runs here, on the process table: the pattern never appears in a command line on
the node, so no shell running the search can match itself. Descendants are included because a
database is a tree (Postgres's backends serve clients while the postmaster is stopped), and the
tree is frozen before it is killed, so that no child forked meanwhile escapes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from clusters.backend import Node
from core.errors import InfraError

GONE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str  # ps's STAT: T is stopped, Z a zombie
    args: str


def process_table(node: Node) -> list[Proc]:
    out = node.read("ps -e -ww -o pid=,ppid=,stat=,args=")  # ps lists itself: never empty
    procs = []
    for line in out.splitlines():
        fields = line.split(None, 3)
        if len(fields) >= 3 and fields[0].isdigit() and fields[1].isdigit():
            args = fields[3] if len(fields) == 4 else ""
            procs.append(Proc(int(fields[0]), int(fields[1]), fields[2], args))
    return procs


def tree(procs: list[Proc], pattern: str, spare: Sequence[str] = ()) -> list[int]:
    """Pids of the live processes whose command line matches, and their descendants, parents
    first; but none that matches a `spare` pattern, nor its descendants (a manager's Postgres,
    its child, left running when the manager alone is killed)."""
    live = [p for p in procs if not p.state.startswith("Z")]
    regex = re.compile(pattern)
    spared = [re.compile(s) for s in spare]
    live = [p for p in live if not any(s.search(p.args) for s in spared)]
    found = [p.pid for p in live if regex.search(p.args)]
    seen = set(found)
    for pid in found:  # grows while it is walked: breadth first
        for child in live:
            if child.ppid == pid and child.pid not in seen:
                seen.add(child.pid)
                found.append(child.pid)
    return found


def freeze_tree(
    node: Node, pattern: str, timeout: float = GONE_TIMEOUT, spare: Sequence[str] = ()
) -> list[int]:
    """SIGSTOP the matching processes and all their descendants, until no new child shows up
    and every one has stopped (or `timeout` passed); returns their pids, parents first. A
    stopped process forks no more, so the tree is then closed: nothing forked meanwhile
    escapes it."""
    frozen: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        procs = process_table(node)
        new = [p for p in tree(procs, pattern, spare) if p not in frozen]
        running = [p.pid for p in procs if p.pid in frozen and not p.state.startswith(("T", "Z"))]
        if new:
            send(node, new, "STOP")
            frozen += new
        if (not new and not running) or time.monotonic() > deadline:
            return frozen  # closed, or as closed as a process stuck in the kernel lets it be
        if not new:
            time.sleep(0.01)  # a stop not yet taken effect: it may still fork once


def kill_tree(node: Node, pattern: str, spare: Sequence[str] = ()) -> list[int]:
    """SIGKILL the matching processes and all their descendants, none escaping: the tree is
    frozen first. Killing parents first is not enough: a child forked between the look and
    the kill loses its parent and, reparented, leaves the tree. Postgres's is the case that
    matters: a backend forked for a connection that way outlives its postmaster, and if it
    then waits on a lock a killed process held it waits forever, attached to the shared
    memory, and no new postmaster will start on that data directory."""
    frozen = freeze_tree(node, pattern, spare=spare)
    if frozen:
        send(node, frozen, "KILL")
    return frozen


def send(node: Node, pids: list[int], sig: str) -> None:
    # Unchecked: a process may have exited since it was listed.
    node.exec(f"kill -{sig} {' '.join(map(str, pids))}", check=False)


def wait_gone(node: Node, pids: list[int], timeout: float = GONE_TIMEOUT) -> None:
    """Wait until the killed processes are gone (reaped by the node's init, not zombies)."""
    deadline = time.monotonic() + timeout
    while True:
        left = {p.pid for p in process_table(node)} & set(pids)
        if not left:
            return
        if time.monotonic() > deadline:
            raise InfraError(
                f"processes {sorted(left)} on {node.name} are still there {timeout:g}s after"
                " the signal (does the node's PID 1 reap orphans?)"
            )
        time.sleep(0.1)


def continue_stopped(node: Node) -> list[int]:
    """SIGCONT every stopped process on the node: undoes any pause without knowing of it."""
    pids = [p.pid for p in process_table(node) if p.state.startswith("T")]
    if pids:
        send(node, pids, "CONT")
    return pids
