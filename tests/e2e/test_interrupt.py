"""Ctrl-C during a fault, as a user presses it: the run exits 130, its history records the heal
and a completion for every operation it invoked, nothing prints a traceback, and no container
or power mount of the run is left, also when Ctrl-C comes a second time while the run heals, and
when the run was started with SIGINT ignored (in the background of a script)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from tests.e2e.conftest import HARNESS

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def history_of(store: Path) -> list[dict]:
    path = store / "latest" / "history.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def ctrl_c_reaches_it() -> None:
    """As in a terminal's foreground: a suite started in the background (`pytest &`) hands its
    children SIGINT ignored, which Python then leaves ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def started_in_the_background() -> None:
    """As `harness run … &` in a script: SIGINT ignored from the start; `kill -INT` still ends
    the run cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def in_place(store: Path, fault: str) -> bool:
    """The fault is in place: its start completed and its stop has not begun."""
    faults = [e for e in history_of(store) if e["process"] == "nemesis"]
    return bool(faults) and (faults[-1]["f"], faults[-1]["type"]) == (f"start-{fault}", "info")


@pytest.mark.parametrize(
    ("package", "fault", "presses", "start"),
    [("partition-majority", "partition", 1, started_in_the_background),
     ("partition-majority", "partition", 2, ctrl_c_reaches_it),
     ("power", "power", 1, ctrl_c_reaches_it)],
)  # fmt: skip
def test_ctrl_c_during_a_fault_ends_the_run_cleanly(
    store: Path, package: str, fault: str, presses: int, start: Callable[[], None]
) -> None:
    run = subprocess.Popen(
        [HARNESS, "run", "--workload", "set", "--nemesis", package,
         "--nemesis-interval", "4", "--time", "120", "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=start,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not in_place(store, fault):
            assert run.poll() is None and time.monotonic() < deadline, f"no {fault} came"
            time.sleep(0.2)
        run.send_signal(signal.SIGINT)
        if presses == 2:
            time.sleep(0.5)  # the heal is under way
            run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out + err
    assert "Traceback" not in out + err, err
    history = history_of(store)
    stops = [e for e in history if e["f"] == f"stop-{fault}" and e["type"] == "info"]
    assert stops and stops[-1]["value"]["cause"] == "heal", "the heal is not in the history"
    open_ops: dict[object, dict] = {}
    for e in history:
        if e["process"] == "nemesis":
            continue
        if e["type"] == "invoke":
            assert e["process"] not in open_ops, f"two invocations in flight: {e}"
            open_ops[e["process"]] = e
        else:
            assert open_ops.pop(e["process"], None) is not None, f"a completion alone: {e}"
    assert open_ops == {}, f"invocations without a completion: {list(open_ops.values())}"
    name = json.loads((store / "latest" / "config.json").read_text())["cluster_name"]
    left = docker.from_env().containers.list(all=True, filters={"name": name})
    assert left == [], [c.name for c in left]
    mounts = Path("/proc/mounts").read_text()
    assert f"/{name}/" not in mounts, "a power mount of the run is left"
