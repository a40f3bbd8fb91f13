"""A safekeeper's durable state: its WAL file and its control file, both fsynced before a reply.

The WAL is one file holding the bytes from `base_lsn` on, so the flush LSN is recomputed on start
from the file's length (seed 001's "locate end of WAL"). The control file is JSON, replaced
atomically (write, fsync, rename, fsync the directory), so a crash leaves the old or the new one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from . import bugs

WAL_FILE = "wal"
CONTROL_FILE = "control.json"


@dataclass
class Control:
    term: int = 0  # the highest term this safekeeper voted in
    voted_for: str = ""  # the proposer it voted for in `term`
    history: list[list[int]] = field(default_factory=list)  # term-history variant
    epoch: int = 0  # epoch variant: the term of the log it holds, once caught up
    proposed_epoch: int = 0  # epoch variant: the epoch it switches to past `vcl`
    vcl: int = 0  # epoch variant: the elected proposer's VCL
    commit_lsn: int = 0
    restart_lsn: int = 0
    base_lsn: int = 0  # LSN of the WAL file's first byte; 0 while it has never held WAL
    system_id: str = ""


class Storage:
    def __init__(self, datadir: str) -> None:
        os.makedirs(datadir, exist_ok=True)
        self.dir = datadir
        self.control = self._load()
        self.fd = os.open(os.path.join(datadir, WAL_FILE), os.O_RDWR | os.O_CREAT, 0o600)

    def _load(self) -> Control:
        path = os.path.join(self.dir, CONTROL_FILE)
        if not os.path.exists(path):
            return Control()
        with open(path) as f:
            return Control(**json.load(f))

    def save(self) -> None:
        path = os.path.join(self.dir, CONTROL_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(self.control), f)
            f.flush()
            _fsync(f.fileno())
        os.replace(tmp, path)
        dirfd = os.open(self.dir, os.O_RDONLY)
        try:
            _fsync(dirfd)
        finally:
            os.close(dirfd)

    @property
    def flush_lsn(self) -> int:
        if not self.control.base_lsn:
            return 0
        return self.control.base_lsn + os.fstat(self.fd).st_size

    def write(self, lsn: int, data: bytes) -> None:
        """Write `data` at `lsn` (extending or overwriting) and fdatasync before returning."""
        if not self.control.base_lsn:
            self.control.base_lsn = lsn
            self.save()
        offset = lsn - self.control.base_lsn
        if offset < 0:
            raise ValueError(f"write at {lsn} precedes the WAL's start {self.control.base_lsn}")
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, offset)
            view, offset = view[written:], offset + written
        if not bugs.on("skip-fsync"):
            os.fdatasync(self.fd)

    def truncate(self, lsn: int) -> None:
        os.ftruncate(self.fd, max(0, lsn - self.control.base_lsn))
        _fsync(self.fd)

    def read(self, start: int, end: int) -> bytes:
        base = self.control.base_lsn
        end = min(end, self.flush_lsn)
        if not base or start < base or start >= end:
            return b""
        return os.pread(self.fd, end - start, start - base)

    def close(self) -> None:
        os.close(self.fd)


def _fsync(fd: int) -> None:
    """fsync, unless the planted bug skips every sync of the safekeeper's files."""
    if not bugs.on("skip-fsync"):
        os.fsync(fd)
