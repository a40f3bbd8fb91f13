"""Planted bugs: each breaks one guarantee on purpose, so a test run can show that the harness
catches it. All are off unless a daemon is started with `--bug NAME`.

- ack-before-quorum: the proxy tells Postgres its WAL is flushed as soon as it has received it,
  not once a quorum of safekeepers has it; a commit can be acknowledged and then lost with the
  primary (breaks: an acknowledged write survives every fault).
- skip-fsync: safekeepers reply before their WAL and control file reach the disk; only a crash of
  the machine (not of the process) loses what they acknowledged (breaks: durability of a quorum).
- accept-lower-term: safekeepers take appends from a proposer of an older term, so a fenced
  primary's WAL still lands (breaks: fencing, one writer per term).
- recover-lowest: a new proposer takes its log from the voter with the least WAL rather than the
  most, so committed WAL beyond it is discarded (breaks: the new term holds every commit).
- deposed-primary-serves: a compute whose term was taken keeps its Postgres up and serving instead
  of stopping it and rebuilding (breaks: only the current term's primary serves).
"""

from __future__ import annotations

NAMES = (
    "ack-before-quorum",
    "skip-fsync",
    "accept-lower-term",
    "recover-lowest",
    "deposed-primary-serves",
)
ACTIVE: set[str] = set()


def on(name: str) -> bool:
    if name not in NAMES:
        raise ValueError(f"no planted bug {name!r}")
    return name in ACTIVE
