"""The packet fault: delay, loss, duplication, reordering and a rate limit on what nodes send.

Like netem it acts on a node's outgoing traffic on its cluster interface. The mechanism is
probed on the node when the fault starts: tc netem where the kernel has it, one qdisc for every
behaviour. Otherwise (kernels built without netem, such as this project's CI machine) each
behaviour falls back on its own:

- loss: iptables `-m statistic --mode random` DROP (a sender of UDP sees EPERM; TCP retransmits);
- delay, reordering, duplication: NFQUEUE and the delayer (`nemesis/delayer.py`), shipped to and
  run on the node; reordering is netem's: that share of packets goes undelayed;
- rate: a tbf qdisc.

The fault's history value says which mechanism did each behaviour on each node. Traffic from
TCP port 22 is left alone, so an ssh backend keeps its control connection.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusters.backend import Node
from clusters.kinds.base import ClusterKind
from core.errors import BadInput, InfraError
from nemesis import iptables, targets
from nemesis.fault import Fault, Replaying, by_name, on_nodes, planned_nodes
from nemesis.processes import process_table, send, tree, wait_gone

CHAIN = "HARNESS-PACKET"
HOOKS = ["OUTPUT"]
HANDLE = "4e51:"  # the tc handle that marks the harness's root qdisc
QUEUE = 20049  # NFQUEUE number, and the mark of the delayer's duplicates
DELAYER_PATH = "/var/lib/harness/nemesis/delayer.py"
DELAYER_LOG = "/var/log/harness/nemesis-delayer.log"
DELAYER_SOURCE = Path(__file__).with_name("delayer.py")
READY_TIMEOUT = 10.0

# Each behaviour with its amounts when the schedule picks it.
BEHAVIORS: dict[str, dict[str, float]] = {
    "delay": {"ms": 50, "jitter_ms": 10},
    "loss": {"percent": 20},
    "duplicate": {"percent": 10},
    "reorder": {"percent": 20},
    "rate": {"kbit": 1000},
}
REORDER_DELAY = {"ms": 10, "jitter_ms": 0}  # reordering needs a delay to overtake
BY_DELAYER = ("delay", "reorder", "duplicate")


class Packet(Fault):
    name = "packet"

    def __init__(
        self, target: str, planned: list[str] | None, behaviors: dict[str, dict[str, float]]
    ) -> None:
        self.target = target
        self.planned = planned
        self.behaviors = behaviors
        self.touched: list[str] = []

    @classmethod
    def planned_for(cls, target: str, nodes: list[str], rng: random.Random) -> Packet:
        """Some of the behaviours, at least one, with their default amounts."""
        chosen = rng.sample(sorted(BEHAVIORS), rng.randint(1, len(BEHAVIORS)))
        behaviors = {b: dict(BEHAVIORS[b]) for b in sorted(chosen)}
        return cls(target, targets.pick(target, nodes, rng), behaviors)

    def plan(self) -> dict[str, Any]:
        return {
            "fault": self.name,
            "target": self.target,
            "targets": self.planned,
            "behaviors": self.behaviors,
        }

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        behaviors = {str(b): {str(k): float(v) for k, v in a.items()}
                     for b, a in plan["behaviors"].items()}  # fmt: skip
        if unknown := sorted(set(behaviors) - set(BEHAVIORS)):
            raise BadInput(f"the schedule's packet fault names no behaviour {unknown[0]!r}")
        return cls(plan["target"], planned_nodes(plan), behaviors)

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        names = targets.resolve(cluster, self.target, self.planned)
        self.touched = names
        done = on_nodes(by_name(cluster, names), lambda node: apply(node, self.behaviors))
        return self.plan() | {"targets": names, "mechanism": done}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        on_nodes(by_name(cluster, self.touched), heal)
        healed, self.touched = self.touched, []
        return self.plan() | {"healed": healed}


def device(node: Node) -> str:
    """The interface that holds the node's own cluster address (else the default route's)."""
    out = node.read(  # the default route's interface at least: empty only if the answer was lost
        iptables.RESOLVE + f'a=$(addr "{node.name}" 2>/dev/null) || true\n'
        'ip -o -4 addr show | awk -v a="$a" \'{split($4, p, "/"); if (p[1] == a) print $2}\'\n'
        "ip -o -4 route show default | awk '{print $5}'\n"
    ).split()
    devices = [d for d in out if d != "lo"]
    if not devices:
        raise InfraError(f"no network interface found on {node.name} for the packet fault")
    return devices[0]


def netem_args(behaviors: dict[str, dict[str, float]]) -> str:
    b = behaviors
    delay = b.get("delay") or (REORDER_DELAY if "reorder" in b else None)
    args = [f"delay {delay['ms']:g}ms {delay['jitter_ms']:g}ms"] if delay else []
    args += [f"{k} {b[k]['percent']:g}%" for k in ("loss", "duplicate", "reorder") if k in b]
    if "rate" in b:
        args.append(f"rate {b['rate']['kbit']:g}kbit")
    return " ".join(args)


def apply(node: Node, behaviors: dict[str, dict[str, float]]) -> dict[str, str]:
    """Set up the behaviours on the node (replacing any packet fault before); behaviour →
    mechanism."""
    heal(node)
    dev = device(node)
    qdisc = f"tc qdisc replace dev {dev} root handle {HANDLE}"
    if node.exec(f"{qdisc} netem {netem_args(behaviors)}", check=False).code == 0:
        return {b: "netem" for b in behaviors}
    used = {}
    if "rate" in behaviors:
        kbit = behaviors["rate"]["kbit"]
        node.exec(f"{qdisc} tbf rate {kbit:g}kbit burst 32kbit latency 400ms")
        used["rate"] = "tbf"
    rules = [f"-m mark --mark {QUEUE} -j RETURN", "-p tcp --sport 22 -j RETURN"]
    if "loss" in behaviors:
        p = behaviors["loss"]["percent"] / 100
        rules.append(f"-o {dev} -m statistic --mode random --probability {p:.4f} -j DROP")
        used["loss"] = "iptables-statistic"
    if any(b in behaviors for b in BY_DELAYER):
        start_delayer(node, behaviors)
        rules.append(f"-o {dev} -j NFQUEUE --queue-num {QUEUE} --queue-bypass")
        used |= {b: "nfqueue" for b in BY_DELAYER if b in behaviors}
    node.exec(iptables.install_script(CHAIN, HOOKS, rules))
    return used


def start_delayer(node: Node, behaviors: dict[str, dict[str, float]]) -> None:
    """Ship the delayer, start it in the background and wait until it has bound the queue."""
    delay = behaviors.get("delay") or (REORDER_DELAY if "reorder" in behaviors else {})
    args = [f"--queue {QUEUE}", f"--mark {QUEUE}"]
    args += [f"--delay-ms {delay['ms']:g}", f"--jitter-ms {delay['jitter_ms']:g}"] if delay else []
    for b in ("reorder", "duplicate"):
        if b in behaviors:
            args.append(f"--{b} {behaviors[b]['percent'] / 100:g}")
    node.put_file(DELAYER_PATH, DELAYER_SOURCE.read_bytes(), mode=0o755)
    node.exec(f"mkdir -p $(dirname {DELAYER_LOG}) && : > {DELAYER_LOG}")
    node.exec(f"python3 {DELAYER_PATH} {' '.join(args)} >> {DELAYER_LOG} 2>&1", detach=True)
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        log = node.exec(f"cat {DELAYER_LOG}").output
        if "ready" in log.split():
            return
        running = tree(process_table(node), re.escape(DELAYER_PATH))
        if not running or time.monotonic() > deadline:
            raise InfraError(f"the packet delayer did not start on {node.name}: {log.strip()}")
        time.sleep(0.05)


def heal(node: Node) -> list[str]:
    """Remove the packet rules, stop the delayer (it lets its held packets go first) and remove
    the harness's qdisc; returns what it did. Stateless."""
    done = []
    if iptables.remove(node, CHAIN, HOOKS):
        done.append(f"removed iptables chain {CHAIN}")
    if delayers := tree(process_table(node), re.escape(DELAYER_PATH)):
        send(node, delayers, "TERM")
        try:
            wait_gone(node, delayers, timeout=3.0)
        except InfraError:
            send(node, delayers, "KILL")
        done.append("stopped the packet delayer")
    for line in node.read("tc qdisc show").splitlines():  # lo's qdisc at least: never empty
        if m := re.match(rf"qdisc (\S+) {HANDLE} dev (\S+) root", line):
            node.exec(f"tc qdisc del dev {m.group(2)} root")
            done.append(f"removed {m.group(1)} qdisc on {m.group(2)}")
    return done
