"""psycopg's warning that a pipeline could not end after the error that ended it stays off the
user's terminal; its other warnings do not."""

from __future__ import annotations

import logging
from unittest import mock

import psycopg
import pytest

import workloads.postgres  # noqa: F401  (installs the filter)


def test_a_pipelines_failed_end_is_not_shown_and_other_warnings_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("psycopg")
    pipeline = mock.Mock(spec=psycopg.Pipeline)
    with caplog.at_level(logging.WARNING, logger="psycopg"):
        logger.warning("error ignored terminating %r: %s", pipeline, "the connection is lost")
        logger.warning("error ignored terminating %r: %s", object(), "a copy's end failed")
        logger.warning("something else psycopg says")
    shown = [r.getMessage() for r in caplog.records]
    assert len(shown) == 2
    assert shown[0].endswith("a copy's end failed") and shown[1] == "something else psycopg says"
