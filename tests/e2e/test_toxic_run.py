"""`harness run --nemesis toxic` end to end on one Postgres: the clients go through the node's
proxy, toxics drawn from the seed come and go, and the run is judged valid, each toxic in the
history (its type, stream and link) and in the report's fault lane."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import valid_run

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_toxics_on_the_client_link_leave_a_correct_cluster_valid(store: Path) -> None:
    _, history = valid_run(
        store, "--cluster", "single", "--workload", "set,bank", "--nemesis", "toxic",
        "--nemesis-interval", "4", "--time", "40", "--seed", "0",
    )  # fmt: skip
    started = [e for e in history if e["process"] == "nemesis" and e["f"] == "start-toxic"]
    done = [e for e in started if e["type"] == "info"]
    assert len(done) >= 3 and not [e for e in done if "error" in e["value"]], done
    assert {e["value"]["link"] for e in done} == {"client"}
    assert len({e["value"]["toxic"] for e in done}) >= 2
    assert all(e["value"]["proxies"] == {"n1": ["client-5432"]} for e in done)
    healed = [e for e in history if e["f"] == "stop-toxic" and e["type"] == "info"]
    assert len(healed) == len(done)
    oks = [e for e in history if e["type"] == "ok" and e["process"] != "nemesis"]
    assert oks, "no operation went through the proxy"
    report = ((store / "latest").resolve() / "report.html").read_text()
    assert report.count("toxic</td>") >= len(done)  # a row of the fault table each
    assert all(e["value"]["toxic"] in report for e in done)
