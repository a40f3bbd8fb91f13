"""Definite versus indeterminate failures: one test per class of error."""

import psycopg
import pytest
from psycopg import errors

from workloads.errors import classify


def outcome(exc: BaseException, phase: str, read_only: bool = False) -> str:
    return classify(exc, phase=phase, read_only=read_only).type  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "exc",
    [
        errors.SerializationFailure("could not serialize access"),
        errors.DeadlockDetected("deadlock detected"),
        errors.UniqueViolation("duplicate key value"),
    ],
)
def test_rollback_errors_are_definite_even_at_commit(exc: Exception) -> None:
    assert outcome(exc, "execute") == "fail"
    assert outcome(exc, "commit") == "fail"


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.QueryCanceled("canceling statement due to user request"),
        errors.CannotConnectNow("the database system is shutting down"),
        TimeoutError("no answer within 5s"),
        RuntimeError("something nobody foresaw"),
    ],
)
def test_errors_during_commit_leave_the_outcome_unknown(exc: Exception) -> None:
    assert outcome(exc, "commit") == "info"


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        TimeoutError("no answer within 5s"),
    ],
)
def test_errors_before_commit_was_sent_are_definite(exc: Exception) -> None:
    assert outcome(exc, "execute") == "fail"


def test_statement_completion_unknown_is_indeterminate_at_commit() -> None:
    assert outcome(errors.StatementCompletionUnknown("unknown"), "commit") == "info"


def test_a_connection_that_was_never_made_is_a_definite_failure() -> None:
    assert outcome(psycopg.OperationalError("connection refused"), "connect") == "fail"


def test_a_read_that_failed_anywhere_is_definite() -> None:
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    assert outcome(lost, "commit", read_only=True) == "fail"


def test_the_error_text_carries_the_sqlstate() -> None:
    result = classify(
        errors.SerializationFailure("could not serialize"), phase="commit", read_only=False
    )
    assert result.error.startswith("40001:")
