"""The harness's own iptables chains on a node: installed whole, removed without any state.

Each fault that filters packets owns one chain, jumped to first from the built-in chains it
hooks, so it applies before any rule of the node's own and is removed by its name alone.
"""

from __future__ import annotations

from clusters.backend import Node

# Shell function for scripts: the first IPv4 address of a node name, as the node resolves it.
RESOLVE = (
    "addr() { a=$(getent ahostsv4 \"$1\" | awk 'NR == 1 {print $1}');"
    ' [ -n "$a" ] || { echo "cannot resolve $1" >&2; return 1; }; echo "$a"; }\n'
)


def install_script(chain: str, hooks: list[str], rules: list[str], prelude: str = "") -> str:
    """Shell that (re)creates `chain` with `rules` (iptables arguments after `-A chain`, which may
    use variables that `prelude` sets) and makes each hook jump to it first; stops at an error."""
    lines = [
        "set -e",
        prelude,
        f"iptables -w -N {chain} 2>/dev/null || iptables -w -F {chain}",
        *(f"iptables -w -A {chain} {rule}" for rule in rules),
        *(
            f"iptables -w -C {hook} -j {chain} 2>/dev/null || iptables -w -I {hook} 1 -j {chain}"
            for hook in hooks
        ),
    ]
    return "\n".join(lines) + "\n"


def remove(node: Node, chain: str, hooks: list[str]) -> bool:
    """Remove `chain` and every jump to it; True when there was one."""
    unhook = "; ".join(
        f"while iptables -w -D {hook} -j {chain} 2>/dev/null; do :; done" for hook in hooks
    )
    out = node.exec(
        f"if iptables -w -S {chain} >/dev/null 2>&1; then {unhook};"
        f" iptables -w -F {chain} && iptables -w -X {chain} && echo removed; fi"
    ).output
    return "removed" in out
