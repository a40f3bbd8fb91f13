"""bench/long_fork.py: a row counts the G-nonadjacent cycles of a checked run apart from its
other anomalies, and each configuration is a command the harness takes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from long_fork import CONFIGS, SCHEDULES, read_run, scheduled

from clusters.kinds.streaming import StreamingCluster


def test_a_row_counts_the_nonadjacent_cycles_and_names_every_anomaly(tmp_path: Path) -> None:
    results = {
        "verdict": "invalid",
        "checkers": {
            "append": {
                "valid": False,
                "anomaly_types": ["G-nonadjacent-item", "lost-append"],
                "anomalies": [
                    {"type": "G-nonadjacent-item", "ops": [{"invoke_time": 7_000_000_000}]},
                    {"type": "G-nonadjacent-item", "ops": [{"invoke_time": 9_000_000_000}]},
                    {"type": "lost-append", "ops": [{"invoke_time": 8_000_000_000}]},
                ],
            },
            "stats": {"valid": True, "ok_per_s": 97.25},
        },
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert read_run(tmp_path) == {
        "verdict": "invalid",
        "nonadjacent": 2,
        "anomalies": "append: G-nonadjacent-item; append: lost-append",
        "first_anomaly_s": 7.0,
        "ops_per_s": 97.2,
    }


def test_every_configuration_is_options_the_streaming_kind_takes() -> None:
    for read_from, replication, rate, concurrency, pause in CONFIGS.values():
        options = {"read_from": read_from, "replication": replication}
        checked = StreamingCluster.checked_options(options)
        assert StreamingCluster.isolation_refused(checked, "repeatable-read") is None
        assert rate >= 0 and concurrency >= 1 and pause >= 0
    assert CONFIGS["control"][0] == "primary"  # the control reads where it writes


def test_each_schedule_replays_on_the_streaming_kind_and_acts_on_a_link_it_has() -> None:
    from nemesis import replay

    links = {link.name for link in StreamingCluster.links}
    for config, schedule in SCHEDULES.items():
        assert config in CONFIGS
        replaying = replay.replaying_on(StreamingCluster, {})
        for entry in replay.entries(schedule, ["n1", "n2", "n3"], replaying):
            assert entry.plan["link"] in links, entry.plan
            replay.fault_of(entry.plan, replaying)
    assert scheduled("load-latency") == [
        "--schedule (latency latency 3, jitter 3 on upstream downstream)"
    ]
