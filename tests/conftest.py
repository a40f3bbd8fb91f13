"""How `make test` spreads the suite over pytest-xdist's workers (`-n 3 --dist loadscope`).

The scope xdist hands out whole is a unit of work, as defined here. A test file is one unit, so
that its module-scoped cluster (or store, or served site) is made once, by one worker, and its
tests run in their written order (the browser's last test reads the screenshots the others took).
The exceptions: files whose tests share nothing but session-wide fixtures, where each test is a
unit of its own so that the long `harness run`s of one file wait side by side; and
`test_faults.py`, one unit per backend, as its module-scoped clusters are.

Units are handed out longest waits first, so that they overlap everything else, and the
Spark-bound unit tests last. A worker starts Spark once, at its first test that needs it (the
`spark` fixture is session-scoped, and a worker is one session).

This lives in a scheduler rather than in `xdist_group` marks: pytest 9.2 no longer lets xdist 3.8
rename a test's id, so `--dist loadgroup` ignores the marks. Ids stay as pytest prints them.
Without `-n`, nothing here applies.
"""

from __future__ import annotations

from typing import Any

import pytest

# Files whose tests are independent of each other: each test is a unit of work.
PER_TEST = {
    "tests/e2e/test_interrupt.py",
    "tests/e2e/test_run_and_check.py",
    "tests/e2e/test_safekeeper_run.py",
    "tests/unit/test_append_by_key.py",
}
# Files whose module-scoped clusters are parametrized: one unit per value found in the test's id.
PER_PARAM = {"tests/integration/test_faults.py": ("docker", "local")}
# The longest single waits (minutes each), handed out before anything else.
FIRST = ("tests/e2e/test_manatee_run.py",)
# Then by directory: the `harness run`s, the clusters, then what mostly computes.
DIRECTORIES = ("e2e", "integration", "browser", "protocol", "unit")


def unit_of(nodeid: str) -> str:
    """The unit of work of the test `nodeid`."""
    path = nodeid.split("::", 1)[0]
    if path in PER_TEST:
        return nodeid
    if path in PER_PARAM and nodeid.endswith("]"):
        ids = set(nodeid[nodeid.index("[") + 1 : -1].split("-"))
        found = [value for value in PER_PARAM[path] if value in ids]
        if len(found) == 1:
            return f"{path}[{found[0]}]"
    return path


def rank(nodeid: str) -> int:
    path = nodeid.split("::", 1)[0]
    if path in FIRST:
        return FIRST.index(path)
    parts = path.split("/")
    directory = parts[1] if len(parts) > 2 else ""
    order = DIRECTORIES.index(directory) if directory in DIRECTORIES else len(DIRECTORIES)
    return len(FIRST) + order


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: units are handed out in its order
        items.sort(key=lambda item: rank(item.nodeid))  # stable: pytest's order within a rank


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """loadscope over the units of work above."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)
