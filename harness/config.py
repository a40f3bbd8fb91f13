"""A run's configuration: what the CLI accepted, validated once, saved as config.json."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import BadInput
from workloads.base import WorkloadOptions
from workloads.postgres import ISOLATION_LEVELS

SCHEDULE = "schedule"  # the nemesis of a run whose faults replay a schedule (`--schedule`)


@dataclass
class RunConfig:
    cluster: str = "safekeeper"
    cluster_options: dict[str, Any] = field(default_factory=dict)
    backend: str = "docker"
    backend_options: dict[str, Any] = field(default_factory=dict)
    workloads: list[str] = field(default_factory=lambda: ["bank", "append"])
    nemesis: list[str] = field(default_factory=lambda: ["none"])
    nemesis_interval: float | None = None  # None: the cluster kind's (nemesis.schedule.timescale)
    time_limit: float = 60.0
    rate: float = 100.0
    concurrency: int = 10
    seed: int = 0
    isolation: str = "serializable"
    model: str | None = None
    op_timeout: float = 5.0
    op_pause_ms: float = 0.0  # the most a transaction pauses between its statements
    # the append workload's shape, as Jepsen's list-append names its knobs
    key_count: int = WorkloadOptions.key_count
    max_writes_per_key: int = WorkloadOptions.max_writes_per_key
    max_txn_length: int = WorkloadOptions.max_txn_length
    cancel_after: float | None = None  # seconds before a client cancels its statement
    settle: float = 5.0
    max_recovery: float | None = None  # seconds; past it a recovery makes the run invalid
    store: Path = Path("results")
    name: str | None = None
    keep_cluster: bool = False
    spark_master: str | None = None
    workload_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the aimed package's faults, given rather than drawn (`--chains`, `harness explore`)
    chains: list[dict[str, Any]] | None = None
    # a run's faults replayed instead of drawn (`--schedule`; nemesis/replay.py), nemesis
    # then being ["schedule"]
    schedule: dict[str, Any] | None = None

    def validate(self) -> None:
        """Reject impossible settings with one sentence each (exit 254)."""
        if self.model is not None:
            from checkers.listappend.models import check_model

            try:
                check_model(self.model)
            except ValueError as e:
                raise BadInput(f"--model: {e}") from e
        if self.time_limit <= 0:
            raise BadInput(f"--time must be positive, got {self.time_limit:g}")
        if self.rate < 0:
            raise BadInput(f"--rate must be 0 (unlimited) or positive, got {self.rate:g}")
        if self.concurrency < 1:
            raise BadInput(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.max_recovery is not None and self.max_recovery <= 0:
            raise BadInput(f"--max-recovery must be positive, got {self.max_recovery:g}")
        if self.nemesis_interval is not None and self.nemesis_interval <= 0:
            raise BadInput(f"--nemesis-interval must be positive, got {self.nemesis_interval:g}")
        if self.op_timeout <= 0:
            raise BadInput(f"--op-timeout must be positive, got {self.op_timeout:g}")
        if self.op_pause_ms < 0:
            raise BadInput(f"--op-pause must be 0 (none) or positive, got {self.op_pause_ms:g}")
        for flag, value in (
            ("--key-count", self.key_count),
            ("--max-writes-per-key", self.max_writes_per_key),
            ("--max-txn-length", self.max_txn_length),
        ):
            if value < 1:
                raise BadInput(f"{flag} must be at least 1, got {value}")
        if self.cancel_after is not None and self.cancel_after <= 0:
            raise BadInput(f"--cancel-after must be positive, got {self.cancel_after:g}")
        if self.isolation not in ISOLATION_LEVELS:
            raise BadInput(
                f"unknown isolation level {self.isolation!r}: "
                f"choose from {', '.join(ISOLATION_LEVELS)}"
            )
        if not self.workloads:
            raise BadInput("--workload needs at least one workload name")
        if self.schedule is not None and (self.chains is not None or self.nemesis != [SCHEDULE]):
            raise BadInput(
                "--schedule replays a run's faults as they were: leave --nemesis and --chains out"
            )
        if self.chains is not None and not {"aimed", "all"} & set(self.nemesis):
            raise BadInput(
                "--chains gives the aimed package's faults: add aimed to --nemesis "
                f"(it is {','.join(self.nemesis)})"
            )

    @property
    def test_name(self) -> str:
        """The store folder for this test: cluster, workloads and nemesis, filesystem-safe."""
        if self.name:
            return safe_name(self.name)
        return safe_name(f"{self.cluster}-{'+'.join(self.workloads)}-{'+'.join(self.nemesis)}")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["store"] = str(self.store)
        return data


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("_") or "test"


def split_names(text: str) -> list[str]:
    """Parse a comma-separated list flag (`bank,append`)."""
    return [part.strip() for part in text.split(",") if part.strip()]
