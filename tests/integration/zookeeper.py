"""A real ZooKeeper for tests: Debian's server, standalone, on a free loopback port."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[str]:
    """A standalone ZooKeeper server on a free loopback port, stopped after the test."""
    if not ZOOKEEPER_JAR.exists():
        pytest.fail(f"{ZOOKEEPER_JAR} is missing: `make test-debs` installs Debian's zookeeper")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "zoo.cfg"
    config.write_text(
        f"tickTime=500\ndataDir={tmp_path / 'zk'}\nclientPort={port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
    )
    server = subprocess.Popen(
        ["java", "-cp", str(ZOOKEEPER_JAR), "org.apache.zookeeper.server.ZooKeeperServerMain",
         str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("ZooKeeper did not start listening") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()
