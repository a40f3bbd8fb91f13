"""The logs checker on what Python itself writes when a daemon's code fails: each log below is
the real output of a small program (run here), in the daemons' log format."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from checkers import logs
from clusters.registry import cluster_kind

PRELUDE = """
import logging, socketserver, socket, threading, time
logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s", level=logging.INFO)
log = logging.getLogger("compute")
log.info("starting")
"""


def output_of(program: str) -> str:
    """What the program writes to its log (stdout and stderr, as `start_once` keeps them)."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(program)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30,
    )  # fmt: skip
    return done.stdout


def verdict(text: str) -> dict:
    return logs.judge({"n2/harness/compute.log": text})


def test_a_log_of_what_faults_do_is_valid() -> None:
    text = output_of("""
        for role in ("candidate", "standby"):
            try:
                socket.create_connection(("127.0.0.1", 9), timeout=0.5)
            except OSError as e:  # as the agent notes what it retries
                log.info("%s: %s: %s", role, type(e).__name__, e)
        class H(socketserver.BaseRequestHandler):
            def handle(self):
                raise ConnectionResetError(104, "Connection reset by peer")
        server = socketserver.TCPServer(("127.0.0.1", 0), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        socket.create_connection(server.server_address).close()
        time.sleep(0.3)
        log.info("serving")
    """)
    assert "ConnectionRefusedError" in text and "ConnectionResetError" in text  # reported...
    result = verdict(text)
    assert result["valid"], result  # ... and what faults do, not a finding
    assert result["files_read"] == 1


def test_a_programming_error_the_daemon_caught_is_named() -> None:
    text = output_of("""
        for _ in range(3):
            try:
                serving, standbys = ["n1"], ["n2"]
                serving - standbys
            except Exception as e:
                log.info("%s: %s: %s", "candidate", type(e).__name__, e)
    """)
    result = verdict(text)
    assert not result["valid"] and result["anomaly_types"] == ["programming-error"]
    (anomaly,) = result["anomalies"]  # three times the same: one anomaly, counted
    assert anomaly["count"] == 3 and anomaly["node"] == "n2" and anomaly["line"] == 2
    assert "n2/harness/compute.log line 2" in anomaly["explanation"]
    assert (
        "raised TypeError" in anomaly["explanation"] and "and 2 more time" in anomaly["explanation"]
    )
    assert anomaly["when"] and anomaly["when"].startswith("20")


def test_a_thread_that_died_is_named_whatever_its_exception() -> None:
    text = output_of("""
        def follow():
            raise OSError("the safekeeper's socket went away")
        t = threading.Thread(target=follow, name="n3")
        t.start(); t.join()
        log.info("still serving")
    """)
    result = verdict(text)
    assert result["anomaly_types"] == ["thread-died"], result
    (anomaly,) = result["anomalies"]
    assert "thread n3" in anomaly["explanation"] and "OSError" in anomaly["explanation"]
    assert anomaly["text"].startswith("Exception in thread n3")


def test_a_daemon_that_died_is_named() -> None:
    text = output_of("""
        import random
        time.sleep(0.1 * random.uniform(-0.5, -0.1))
    """)
    result = verdict(text)
    assert result["anomaly_types"] == ["daemon-died"], result
    assert "ValueError: sleep length must be non-negative" in result["anomalies"][0]["explanation"]


def test_a_programming_error_in_a_request_handler_is_named_and_chained_ones_read_whole() -> None:
    text = output_of("""
        class H(socketserver.BaseRequestHandler):
            def handle(self):
                try:
                    {}["term"]
                except KeyError:
                    raise RuntimeError("no term")
        server = socketserver.TCPServer(("127.0.0.1", 0), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        socket.create_connection(server.server_address).close()
        time.sleep(0.3)
        try:
            None > 0
        except TypeError:
            raise ValueError("chained")
    """)
    assert "During handling of the above exception" in text
    found = {(r.context, r.cls) for r in logs.reports("f", text)}
    assert found == {("handled", "RuntimeError"), ("daemon-died", "ValueError")}, found
    # a handled RuntimeError is no finding; the death is
    assert verdict(text)["anomaly_types"] == ["daemon-died"]


def test_a_library_that_logs_what_it_handles_is_not_a_death() -> None:
    text = output_of("""
        kazoo = logging.getLogger("kazoo.client")
        try:
            raise ConnectionError("Connection dropped")
        except ConnectionError:
            kazoo.exception("Connection dropped")
        log.info("sitter still stepping")
    """)
    assert "Traceback" in text
    assert verdict(text)["valid"]


def test_the_declared_logs_are_read_from_each_node_folder(tmp_path: Path) -> None:
    for node, line in (("n1", "candidate: TypeError: bad"), ("n2", "standby: waiting")):
        (tmp_path / node / "harness").mkdir(parents=True)
        (tmp_path / node / "harness" / "compute.log").write_text(line + "\n")
        (tmp_path / node / "harness" / "postgres.log").write_text("KeyError: not ours\n")
    result = logs.check(None, str(tmp_path), ("harness/compute.log",))
    assert result["files_read"] == 2 and result["anomaly_counts"] == {"programming-error": 1}
    assert result["anomalies"][0]["node"] == "n1"
    assert logs.check(None, str(tmp_path), ())["files_read"] == 0  # a kind with none declared


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("safekeeper", ("harness/safekeeper.log", "harness/compute.log")),
     ("manatee", ("harness/sitter.log",)), ("patroni", ()), ("streaming", ())],
)  # fmt: skip
def test_a_kind_declares_its_own_daemons_logs_where_the_run_keeps_them(
    kind: str, expected: tuple[str, ...]
) -> None:
    assert cluster_kind(kind).own_logs_in_run() == expected
