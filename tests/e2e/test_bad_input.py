"""Bad input gets one clear sentence and exit 254, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.conftest import harness


def assert_one_sentence(result, code: int = 254) -> str:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    text = result.stderr.strip()
    assert text.startswith("error:") and len(text.splitlines()) == 1, text
    return text


def test_unknown_workload(store: Path) -> None:
    text = assert_one_sentence(harness("run", "--workload", "bank,bogus", "--store", str(store)))
    assert "bogus" in text and "bank" in text
    assert not store.exists()  # nothing was started


def test_unknown_nemesis(store: Path) -> None:
    text = assert_one_sentence(harness("run", "--nemesis", "bogus", "--store", str(store)))
    assert "bogus" in text


def test_mode_of_another_cluster_kind(store: Path) -> None:
    args = ("run", "--cluster", "single", "--mode", "confirm-rollback", "--store", str(store))
    text = assert_one_sentence(harness(*args))
    assert "--mode" in text and "safekeeper" in text
    assert "bogus" in assert_one_sentence(harness("run", "--mode", "bogus"))


def test_tarantool_sizes_and_options(store: Path) -> None:
    args = ("run", "--cluster", "tarantool", "--store", str(store))
    text = assert_one_sentence(harness(*args, "--instances", "4"))
    assert "--instances must be 3 or 5" in text
    text = assert_one_sentence(harness(*args, "--computes", "2"))
    assert "--computes applies to --cluster safekeeper only" in text
    assert "positive" in assert_one_sentence(harness(*args, "--synchro-timeout", "-1"))
    assert not store.exists()


def test_streaming_reads_on_standbys_need_an_isolation_they_can_run(store: Path) -> None:
    args = ("run", "--cluster", "streaming", "--read-from", "replicas", "--store", str(store))
    text = assert_one_sentence(harness(*args))
    assert "cannot run serializable transactions" in text and "repeatable-read" in text
    assert "'semi' is not one of" in assert_one_sentence(harness(*args, "--replication", "semi"))
    assert not store.exists()


def test_unknown_flag_is_254_not_click_s_2() -> None:
    assert "--frobnicate" in assert_one_sentence(harness("run", "--frobnicate"))


def test_bad_number() -> None:
    assert_one_sentence(harness("run", "--time", "-5"))
    assert "--op-pause must be" in assert_one_sentence(harness("run", "--op-pause", "-1"))
    assert "--cancel-after must be" in assert_one_sentence(harness("run", "--cancel-after", "0"))
    assert "--key-count must be" in assert_one_sentence(harness("run", "--key-count", "0"))


def test_missing_docker_engine(store: Path) -> None:
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    text = assert_one_sentence(harness("run", "--store", str(store), env=env))
    assert "Docker" in text


def test_malformed_history_line(tmp_path: Path) -> None:
    good = {"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "add", "value": 1}
    lines = [json.dumps(good), "{this is not json}", json.dumps(good | {"index": 2})]
    history = tmp_path / "h.jsonl"
    history.write_text("\n".join(lines) + "\n")
    text = assert_one_sentence(harness("check", str(history), "--workload", "set"))
    assert "line 2" in text


def test_bare_history_without_workload(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    history.write_text("")
    assert "--workload" in assert_one_sentence(harness("check", str(history)))


@pytest.mark.parametrize("path", ["/nonexistent/run"])
def test_missing_path(path: str) -> None:
    assert_one_sentence(harness("check", path))


def test_impossible_fault_target(store: Path) -> None:
    text = assert_one_sentence(
        harness(
            "run", "--cluster", "single", "--nemesis", "partition-majority", "--store", str(store)
        )
    )
    assert "partition-majority needs at least 3 nodes" in text and "single" in text


def test_an_empty_history_is_one_sentence_not_a_java_stack(tmp_path: Path) -> None:
    for content in ("", "\n  \n"):
        history = tmp_path / "history.jsonl"
        history.write_text(content)
        text = assert_one_sentence(harness("check", str(history), "--workload", "set"))
        assert "holds no events" in text


def test_max_recovery_must_be_positive(store: Path) -> None:
    assert "--max-recovery must be positive" in assert_one_sentence(
        harness("run", "--max-recovery", "0", "--store", str(store))
    )
    assert "--max-recovery must be positive" in assert_one_sentence(
        harness("check", str(store), "--max-recovery", "-3")
    )


def test_power_needs_a_backend_with_the_layer(store: Path) -> None:
    args = ["run", "--nemesis", "power", "--backend", "ssh", "--node", "h1"]
    text = assert_one_sentence(harness(*args, "--store", str(store)))
    assert "the power fault needs the power layer" in text and "--backend docker" in text


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--safekeepers", "0", "--safekeepers must be at least 1, not 0"),
        ("--computes", "0", "--computes must be at least 1, not 0"),
        ("--synchro-timeout", "0", "--synchro-timeout must be positive"),
        ("--bug", "ack-before-quorum,nope", "--bug names no planted bug 'nope'"),
    ],
)
def test_a_kind_option_out_of_its_range_is_refused_before_anything_starts(
    store: Path, option: str, value: str, said: str
) -> None:
    """Checked where the kind declares it: a count of 0 once ran three safekeepers and
    recorded 0 in config.json."""
    text = assert_one_sentence(harness("run", option, value, "--store", str(store)))
    assert said in text
    assert not store.exists()


def test_a_port_out_of_range_is_refused() -> None:
    text = assert_one_sentence(harness("serve", "--port", "99999"))
    assert "--port" in text and "99999" in text


def test_a_seeds_history_on_a_kind_without_safekeepers_is_refused(store: Path) -> None:
    args = ("run", "--cluster", "patroni", "--nemesis", "partition-seed001", "--store", str(store))
    text = assert_one_sentence(harness(*args))
    assert "partition-seed001 needs computes elected by a quorum of safekeepers" in text
    assert not store.exists()  # refused before a cluster started


def test_a_witness_fault_without_a_witness_is_refused(store: Path) -> None:
    args = ("run", "--cluster", "repmgr", "--witness", "off", "--nemesis", "partition-dcs")
    text = assert_one_sentence(harness(*args, "--store", str(store)))
    assert "needs a cluster with a coordination service" in text and "with these options" in text
    assert not store.exists()  # refused before a cluster started


def test_a_moment_no_kind_has_is_refused_by_the_gate(tmp_path: Path) -> None:
    text = assert_one_sentence(harness("gate", "--require-moment", "no-such-moment", str(tmp_path)))
    assert "no cluster kind has a moment 'no-such-moment'" in text and "term-won" in text


def test_explore_and_chains_refuse_what_they_cannot_run(tmp_path: Path, store: Path) -> None:
    assert "--budget must be positive" in assert_one_sentence(
        harness("explore", "--budget", "0", "--store", str(store))
    )
    text = assert_one_sentence(harness("explore", "--nemesis", "partition", "--store", str(store)))
    assert "has none: give --nemesis aimed, or all" in text
    chains = tmp_path / "chains.json"
    chains.write_text(json.dumps([{"moment": "leader-key-taken", "strike": "kill"}]))
    text = assert_one_sentence(harness("run", "--chains", str(chains), "--store", str(store)))
    assert "'leader-key-taken', which this cluster kind does not have" in text
    chains.write_text("{}")
    assert "no list of chains" in assert_one_sentence(harness("run", "--chains", str(chains)))
    assert "--nemesis-interval must be positive" in assert_one_sentence(
        harness("run", "--nemesis-interval", "0")
    )
    assert not store.exists()


def test_a_schedule_that_cannot_be_replayed_is_refused(tmp_path: Path, store: Path) -> None:
    schedule = tmp_path / "schedule.json"
    kill = {"fault": "kill", "target": "one", "targets": ["n9"]}
    doc = {"format": "harness-schedule", "version": 1, "cluster": "safekeeper",
           "faults": [{"start_s": 1.0, "stop_s": 5.0, "plan": kill}]}  # fmt: skip
    schedule.write_text(json.dumps(doc))
    text = assert_one_sentence(harness("run", "--schedule", str(schedule), "--store", str(store)))
    assert "names n9, which this cluster does not have" in text
    both = harness("run", "--schedule", str(schedule), "--nemesis", "kill", "--store", str(store))
    assert "leave --nemesis and --chains out" in assert_one_sentence(both)
    schedule.write_text(json.dumps(doc | {"version": 2}))
    assert "reads version 1" in assert_one_sentence(harness("run", "--schedule", str(schedule)))
    ran = tmp_path / "elsewhere" / "t" / "20261201T000000"
    ran.mkdir(parents=True)
    (ran / "history.jsonl").write_text("")
    said = assert_one_sentence(harness("export", str(ran), "--format", "schedule"))
    assert "no run folder with a config.json" in said
    assert not store.exists()
