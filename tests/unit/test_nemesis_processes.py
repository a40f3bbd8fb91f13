"""Finding a cluster's process tree in a node's process table, without a node."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.backend import ExecResult, Node, NodeCommandError
from nemesis.processes import Proc, continue_stopped, kill_tree, process_table, tree

PS = """\
    1     0 Ss   /usr/bin/tini -s -- sleep infinity
    7     1 S    sleep infinity
   40     1 Ss   /usr/lib/postgresql/15/bin/postgres -D /var/lib/harness/pgdata
   41    40 Ss   postgres: checkpointer
   42    40 Ts   postgres: walwriter
   43    40 Zs   [postgres] <defunct>
   50    41 S    postgres: some grandchild
   60     1 T    python3 /opt/echo.py
   77     0 Rs   ps -e -ww -o pid=,ppid=,stat=,args=
"""


class ScriptedNode(Node):
    """Answers `ps` with a fixed table and remembers every command."""

    name = "n1"

    def __init__(self) -> None:
        self.commands: list[str] = []

    def _shell(self, cmd: str, user: str, env: dict[str, str], detach: bool) -> ExecResult:
        self.commands.append(cmd)
        return ExecResult(0, PS if cmd.startswith("ps ") else "")

    def _put_file(self, path: str, data: bytes, mode: int, owner: str) -> None:
        raise AssertionError

    def get(self, path: str, dest: Path) -> bool:
        raise AssertionError

    def logs(self) -> str:
        return ""

    def endpoint(self, port: int) -> tuple[str, int]:
        raise AssertionError


def test_the_process_table_is_parsed() -> None:
    procs = process_table(ScriptedNode())
    assert procs[2] == Proc(
        40, 1, "Ss", "/usr/lib/postgresql/15/bin/postgres -D /var/lib/harness/pgdata"
    )
    assert len(procs) == 9


class LossyNode(ScriptedNode):
    """Hands back no output for its first `lost` commands, as Docker's exec has been seen to."""

    def __init__(self, lost: int) -> None:
        super().__init__()
        self.lost = lost

    def _shell(self, cmd: str, user: str, env: dict[str, str], detach: bool) -> ExecResult:
        answer = super()._shell(cmd, user, env, detach)
        if len(self.commands) <= self.lost:
            return ExecResult(0, "")
        return answer if cmd.startswith("ps ") else ExecResult(0, "12\n40\n41\n")


def test_a_process_table_that_came_back_empty_is_asked_again() -> None:
    node = LossyNode(lost=2)
    assert len(process_table(node)) == 9
    assert len(node.commands) == 3
    assert process_table(LossyNode(lost=3)) == []  # READ_TRIES: an empty answer in the end


def test_signal_asks_pgrep_again_and_leaves_out_its_own_shell() -> None:
    node = LossyNode(lost=1)
    assert node.signal("postgres", "STOP") == [40, 41]
    assert node.commands[-1] == "kill -STOP 40 41"
    with pytest.raises(NodeCommandError, match="no output"):
        LossyNode(lost=3).signal("postgres", "STOP")


def test_tree_is_the_match_and_its_live_descendants_parents_first() -> None:
    procs = process_table(ScriptedNode())
    assert tree(procs, "/usr/lib/postgresql/15/bin/postgres") == [40, 41, 42, 50]
    assert tree(procs, r"^python3 /opt/echo\.py") == [60]
    assert tree(procs, "nothing like this") == []


def test_a_spared_process_and_its_descendants_are_left_out_of_the_tree() -> None:
    """As pg_autoctl's Postgres, a child of the keeper that a kill of the keeper alone spares:
    here tini stands for the keeper and the postmaster for its Postgres."""
    procs = process_table(ScriptedNode())
    assert tree(procs, "tini") == [1, 7, 40, 60, 41, 42, 50]
    assert tree(procs, "tini", ["/usr/lib/postgresql/15/bin/postgres"]) == [1, 7, 60]


def test_continue_stopped_signals_only_stopped_processes() -> None:
    node = ScriptedNode()
    assert continue_stopped(node) == [42, 60]
    assert node.commands[-1] == "kill -CONT 42 60"


class ForkingNode(ScriptedNode):
    """A postmaster that forks a backend for a connection between the first look and the
    first signal: the table the second `ps` shows has the new child."""

    TABLES = (
        "    1     0 Ss   tini\n   40     1 Ss   /usr/lib/postgresql/15/bin/postgres -D x\n"
        "   41    40 Ss   postgres: checkpointer\n",
        "    1     0 Ss   tini\n   40     1 Ts   /usr/lib/postgresql/15/bin/postgres -D x\n"
        "   41    40 Ts   postgres: checkpointer\n   58    40 Ss   postgres: harness [local]\n",
    )
    FROZEN = (
        "    1     0 Ss   tini\n   40     1 Ts   /usr/lib/postgresql/15/bin/postgres -D x\n"
        "   41    40 Ts   postgres: checkpointer\n   58    40 Ts   postgres: harness [local]\n"
    )

    def _shell(self, cmd: str, user: str, env: dict[str, str], detach: bool) -> ExecResult:
        self.commands.append(cmd)
        if not cmd.startswith("ps "):
            return ExecResult(0, "")
        looks = sum(c.startswith("ps ") for c in self.commands)
        return ExecResult(0, self.TABLES[looks - 1] if looks <= len(self.TABLES) else self.FROZEN)


def test_kill_freezes_the_tree_first_so_a_child_forked_meanwhile_is_killed_too() -> None:
    """Killed at once, the postmaster would leave backend 58 to init, outside the tree."""
    node = ForkingNode()
    assert kill_tree(node, "/usr/lib/postgresql/15/bin/postgres") == [40, 41, 58]
    signals = [c for c in node.commands if c.startswith("kill ")]
    assert signals == ["kill -STOP 40 41", "kill -STOP 58", "kill -KILL 40 41 58"]
