"""How the Tarantool client words an error for the history: the codes that mean the leader rolled
the transaction back must read as a rollback to the confirm/rollback checkers, the others not."""

from __future__ import annotations

import pytest
from tarantool.error import DatabaseError, NetworkError

from checkers.rollback import rolled_back
from workloads.tarantool_client import describe, server_error


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (216, "Quorum collection for a synchronous transaction is timed out"),
        (217, "A rollback for a synchronous transaction is received"),
        (40, "Failed to write to disk"),
    ],
)
def test_the_leader_s_rollbacks_read_as_rollbacks(code: int, message: str) -> None:
    text = describe(DatabaseError(code, message))
    assert text.startswith(f"ER {code}: {message} (")
    assert rolled_back(text)


def test_a_refusal_by_a_read_only_node_is_no_rollback() -> None:
    message = "Can't modify data because this instance is in read-only mode."
    text = describe(DatabaseError(7, message))
    assert text == f"ER 7: {message}"
    assert not rolled_back(text)


def test_a_lost_connection_is_the_connector_s_error_not_the_server_s() -> None:
    """The connector's NetworkError subclasses DatabaseError and carries the errno as its code:
    taken for a server's answer, a lost connection would count as a definite failure."""
    lost = NetworkError(ConnectionResetError(104, "Connection reset by peer"))
    assert not server_error(lost)
    assert server_error(DatabaseError(216, "Quorum collection ... timed out"))
    text = describe(lost)
    assert text.startswith("NetworkError: ") and not rolled_back(text)
