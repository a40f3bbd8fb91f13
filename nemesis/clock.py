"""The clock fault: bump or strobe the clocks of the target nodes; reset them at the fault's end.

Only the cluster's processes see it, through libfaketime: they start with it preloaded, reading
the node's clock file (`clusters.kinds.base.under_faketime`), and this fault rewrites that file (a
relative offset such as "+1.250" or "-3.000" seconds; "+0" is no offset). A bump writes one
offset; a strobe runs a small loop on the node that flips the offset between +delta and zero
every period (one command per flip from the harness would be far too slow). The host clock is
never touched and no node needs privileges. Writes are a rename, so a reader never sees a
half-written file.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from clusters.backend import Node
from clusters.kinds.base import ClusterKind
from clusters.kinds.on_node import CLOCK_FILE
from nemesis import targets
from nemesis.fault import Fault, Replaying, by_name, on_nodes, planned_nodes
from nemesis.processes import process_table, send, tree

STROBE_PATH = "/var/lib/harness/nemesis/clock-strobe.sh"
STROBE_SCRIPT = b"""#!/bin/sh
# The clock nemesis's strobe: flips the clock offset in file $3 between $1 and +0 every $2
# seconds, until it is killed.
while :; do
    printf '%s\\n' "$1" > "$3.strobe" && mv "$3.strobe" "$3"
    sleep "$2"
    printf '+0\\n' > "$3.strobe" && mv "$3.strobe" "$3"
    sleep "$2"
done
"""
# libfaketime's shared memory, named after the pid that made it; a killed process leaves it.
SHM_LEFTOVERS = (
    "for f in /dev/shm/faketime_shm_* /dev/shm/sem.faketime_sem_*; do"
    ' [ -e "$f" ] || continue; [ -d "/proc/${f##*_}" ] && continue; rm -f "$f"; echo "$f"; done'
)


def offset(ms: int) -> str:
    """libfaketime's relative offset, in seconds with a sign."""
    return f"{ms / 1000:+.3f}"


class Clock(Fault):
    name = "clock"

    def __init__(
        self, mode: str, target: str, planned: list[str] | None, delta_ms: int, period_ms: int = 0
    ) -> None:
        self.mode = mode  # "bump" or "strobe"
        self.target = target
        self.planned = planned
        self.delta_ms = delta_ms
        self.period_ms = period_ms
        self.touched: list[str] = []

    @classmethod
    def planned_for(cls, target: str, nodes: list[str], rng: random.Random) -> Clock:
        """A bump of 128 ms to 262 s either way, or a strobe of up to 16 s every 64 ms to 1 s
        (log-uniform: small skews are as likely as large ones)."""
        picked = targets.pick(target, nodes, rng)
        if rng.random() < 0.5:
            delta = round(2 ** rng.uniform(7, 18)) * rng.choice((-1, 1))
            return cls("bump", target, picked, delta)
        return cls(
            "strobe", target, picked, round(2 ** rng.uniform(7, 14)), round(2 ** rng.uniform(6, 10))
        )

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        return cls(
            plan["mode"], plan["target"], planned_nodes(plan), int(plan["delta_ms"]),
            int(plan.get("period_ms", 0)),
        )  # fmt: skip

    def plan(self) -> dict[str, Any]:
        plan = {
            "fault": self.name,
            "mode": self.mode,
            "target": self.target,
            "targets": self.planned,
        }
        plan["delta_ms"] = self.delta_ms
        if self.mode == "strobe":
            plan["period_ms"] = self.period_ms
        return plan

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        names = targets.resolve(cluster, self.target, self.planned)
        self.touched = names

        def skew(node: Node) -> None:
            if self.mode == "bump":
                write_offset(node, offset(self.delta_ms))
            else:
                node.put_file(STROBE_PATH, STROBE_SCRIPT, mode=0o755)
                period = f"{self.period_ms / 1000:.3f}"
                node.exec(
                    f"sh {STROBE_PATH} {offset(self.delta_ms)} {period} {CLOCK_FILE}", detach=True
                )

        on_nodes(by_name(cluster, names), skew)
        return self.plan() | {"targets": names, "mechanism": "libfaketime"}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        on_nodes(by_name(cluster, self.touched), heal)
        reset, self.touched = self.touched, []
        return self.plan() | {"reset": reset}


def write_offset(node: Node, spec: str) -> None:
    node.exec(
        f"mkdir -p $(dirname {CLOCK_FILE}) && printf '%s\\n' {spec} > {CLOCK_FILE}.tmp"
        f" && chmod 644 {CLOCK_FILE}.tmp && mv {CLOCK_FILE}.tmp {CLOCK_FILE}"
    )


def offset_set(node: Node) -> str:
    """The offset the node's clock is set to ("" when none was ever set)."""
    # prefixed, so that an answer that came back empty is known lost and asked again
    said = node.read(f"echo offset: $(cat {CLOCK_FILE} 2>/dev/null)")
    return said.strip().removeprefix("offset:").strip()


def heal(node: Node) -> list[str]:
    """Stop any strobe, set the offset back to zero, remove libfaketime's leftovers from killed
    processes; returns what it did. Stateless."""
    done = []
    strobes = tree(process_table(node), re.escape(STROBE_PATH))
    if strobes:
        send(node, strobes, "KILL")
        done.append("stopped the clock strobe")
    current = offset_set(node)
    if current not in ("", "+0"):
        write_offset(node, "+0")
        done.append(f"reset the clock offset {current} to +0")
    done += [f"removed {f}" for f in node.exec(SHM_LEFTOVERS).output.split()]
    return done
