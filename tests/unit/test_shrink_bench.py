"""bench/shrink.py: every case is a command `harness run` takes (its options parsed and checked
as the CLI checks them), and keeps an anomaly type a checker names."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from shrink import CASES

import nemesis
from checkers import sets
from clusters.registry import cluster_kind
from harness.cli import run, run_config


def test_every_case_is_a_run_the_harness_takes() -> None:
    for name, (_, options, keep) in CASES.items():
        ctx = run.make_context("run", list(options))
        cfg = run_config(dict(ctx.params))
        cfg.validate()
        kind = cluster_kind(cfg.cluster)
        checked = kind.checked_options(cfg.cluster_options)
        nemesis.validate(cfg.nemesis, kind.nodes_needed(checked), cfg.cluster, kind.coordinated,
                         kind)  # fmt: skip
        # a type some checker names: hyphenated, or one of the set checker's own
        assert keep is None or "-" in keep or keep in sets.ANOMALY_TYPES, name
