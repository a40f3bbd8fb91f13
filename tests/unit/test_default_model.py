"""The model a run's append histories are held to by default: what the isolation promises, with
real-time order on a cluster that keeps one primary (a read that begins after a COMMIT returned
sees it there), and always what --model says."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rich.console import Console

from harness.config import RunConfig
from harness.runner import Runner


def model_of(monkeypatch: pytest.MonkeyPatch, **settings: object) -> str:
    monkeypatch.setattr("harness.runner.make_backend", lambda name, **kw: SimpleNamespace())
    runner = Runner(RunConfig(workloads=["append"], **settings), Console(quiet=True))
    (append,) = runner.workloads
    return append.checker_params()["model"]


@pytest.mark.parametrize(
    ("cluster", "isolation", "model"),
    [
        ("safekeeper", "serializable", "strict-serializable"),
        ("single", "serializable", "strict-serializable"),
        ("safekeeper", "repeatable-read", "strong-snapshot-isolation"),
        ("safekeeper", "read-committed", "read-committed"),
        ("tarantool", "serializable", "serializable"),
    ],
)
def test_a_single_primary_is_held_to_real_time_order(
    monkeypatch: pytest.MonkeyPatch, cluster: str, isolation: str, model: str
) -> None:
    assert model_of(monkeypatch, cluster=cluster, isolation=isolation) == model


def test_model_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    assert model_of(monkeypatch, model="serializable") == "serializable"
