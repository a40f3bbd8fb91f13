"""The logs checker: what the daemons written for the harness (the reference systems under
`systems/`) say of themselves, in the spirit of Jepsen's log-file-pattern checker.

A history shows what clients saw; some bugs show first, or only, in the daemon that has them: a
thread that ended on an exception nothing caught (a compute that no longer replicates to one
safekeeper), a daemon that died, an error no correct code raises (a TypeError the agent caught
and retried forever). Such a daemon may well keep every promise for 120 s, and the run would be
judged valid. The kind declares which of its logs are of its own daemons (`ClusterKind.own_logs`);
Postgres's, Patroni's, etcd's and ZooKeeper's are not read: an exception is theirs to log.

Each report of an exception is read with its context:
- a traceback after "Exception in thread NAME:": the thread died (`thread-died`);
- a traceback after "Exception occurred during processing of request" (socketserver carried
  on), or after a line a library logged it with (kazoo's connection loop logs what it handles),
  or a log line that names an exception ("candidate: TypeError: …"): handled; a finding only
  when its class is one no correct code raises (`programming-error`: TypeError, NameError,
  AttributeError, …);
- any other traceback: the daemon died (`daemon-died`). The daemons never log a traceback of
  what they handle (they name the exception on one line), so one of theirs is Python's own
  report of an exception that ended the program.
Socket errors, timeouts and refusals in a handled report are what faults do, and are not
findings. Reports that say the same thing in the same file are one anomaly, with a count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from core.history import Op

# Exceptions that no correct code raises, whatever the faults: the code itself is wrong.
PROGRAMMING_ERRORS = (
    "TypeError",
    "NameError",
    "UnboundLocalError",
    "AttributeError",
    "IndexError",
    "KeyError",
    "ZeroDivisionError",
    "AssertionError",
    "RecursionError",
)
TRACEBACK = "Traceback (most recent call last):"
THREAD = re.compile(r"^Exception in thread (?P<name>.+?):\s*$")
REQUEST = "Exception occurred during processing of request"
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# the last line of a traceback: "ValueError: …", "socket.timeout: …", "KeyError: 'x'"
RAISED = re.compile(
    r"^(?P<cls>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)?)(?::\s?(?P<msg>.*))?$"
)
NOTED = re.compile(rf"\b(?P<cls>{'|'.join(PROGRAMMING_ERRORS)}): (?P<msg>.*)$")
WHEN = re.compile(r"^(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[,.]\d+)?)")
# a log line of a library that logs the exceptions it handles with their traceback
LIBRARY_LINE = re.compile(r"^\d{4}-\d\d-\d\d \S+ kazoo[.\s]")
MOST_SHOWN = 20  # anomalies named one by one; the rest are counted


@dataclass(frozen=True)
class Report:
    """One exception a log shows: where, what, and in which context."""

    file: str
    line: int  # 1-based, where the report begins
    context: str  # thread-died, daemon-died, handled
    cls: str
    message: str
    when: str | None  # the log's own timestamp of the report, when it has one
    text: str  # the lines that show it

    @property
    def anomaly(self) -> str | None:
        """The anomaly type this report is, or None when it is what faults do."""
        if self.context in ("thread-died", "daemon-died"):
            return self.context
        short = self.cls.rsplit(".", 1)[-1]
        return "programming-error" if short in PROGRAMMING_ERRORS else None


def reports(file: str, text: str) -> list[Report]:
    """Every exception the log `text` (of `file`) reports, with its context."""
    lines = text.splitlines()
    found: list[Report] = []
    i = 0
    last_when: str | None = None
    while i < len(lines):
        line = lines[i]
        if m := WHEN.match(line):
            last_when = m["when"]
        if line.strip() == TRACEBACK:
            end = _traceback_end(lines, i)
            raised = RAISED.match(lines[end].strip()) if end < len(lines) else None
            before = _previous(lines, i)
            if (t := THREAD.match(before)) is not None:
                context, start = "thread-died", i - 1
            elif before.startswith(REQUEST) or LIBRARY_LINE.match(before):
                context, start = "handled", i - 1
            else:
                context, start = "daemon-died", i
            cls = raised["cls"] if raised else "unknown"
            msg = (raised["msg"] or "") if raised else ""
            if t is not None:
                msg = f"{msg} (thread {t['name']})"
            shown = "\n".join(lines[max(start, 0) : min(end + 1, len(lines))])
            found.append(Report(file, start + 1, context, cls, msg, last_when, shown))
            i = end + 1
            continue
        if (m := NOTED.search(line)) and not THREAD.match(line):
            found.append(Report(file, i + 1, "handled", m["cls"], m["msg"], last_when, line))
        i += 1
    return found


def _traceback_end(lines: Sequence[str], start: int) -> int:
    """The index of a traceback's last line: the first line after its frames that is not
    indented (chained tracebacks, "During handling …", are read as one, ending at the last)."""
    i = start + 1
    while i < len(lines):
        line = lines[i]
        if line.startswith((" ", "\t")) or not line.strip():
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and lines[j].startswith(CHAINED):
            k = j + 1  # on to the chained traceback's frames
            while k < len(lines) and lines[k].strip() != TRACEBACK:
                k += 1
            i = k + 1
            continue
        return i
    return len(lines) - 1


def _previous(lines: Sequence[str], i: int) -> str:
    """The last non-blank line before line i ("" at the top)."""
    for j in range(i - 1, -1, -1):
        if lines[j].strip():
            return lines[j]
    return ""


def judge(texts: Mapping[str, str]) -> dict[str, Any]:
    """The verdict on the logs `texts` (a file's name in the run, "n2/harness/compute.log" →
    its text): each report that is a finding, those saying the same in the same file once."""
    grouped: dict[tuple[str, str, str, str], list[Report]] = {}
    read = 0
    for file, text in sorted(texts.items()):
        read += 1
        for r in reports(file, text):
            if (kind := r.anomaly) is not None:
                grouped.setdefault((kind, r.file, r.cls, r.message), []).append(r)
    anomalies = [_anomaly(kind, same) for (kind, *_), same in grouped.items()]
    anomalies.sort(key=lambda a: (a["file"], a["line"]))
    counts: dict[str, int] = {}
    for a in anomalies:
        counts[a["type"]] = counts.get(a["type"], 0) + a["count"]
    return {
        "valid": not anomalies,
        "anomaly_types": sorted(counts),
        "anomaly_counts": counts,
        "anomalies": anomalies[:MOST_SHOWN],
        "unshown": max(0, len(anomalies) - MOST_SHOWN),
        "files_read": read,
    }


def _anomaly(kind: str, same: list[Report]) -> dict[str, Any]:
    first = same[0]
    node = first.file.split("/", 1)[0]
    daemon = f"{node}'s {PurePosixPath(first.file).stem}"  # n2's compute
    where = f"{first.file} line {first.line}" + (f" ({first.when})" if first.when else "")
    again = f", and {len(same) - 1} more time(s) in that file" if len(same) > 1 else ""
    said = f"{first.cls}: {first.message}".rstrip(": ")
    why = {
        "thread-died": f"a thread of {daemon} ended on an exception nothing caught ({said})",
        "daemon-died": f"{daemon} ended on an exception nothing caught ({said})",
        "programming-error": (
            f"{daemon} raised {first.cls}, which no correct code raises whatever the "
            f"faults, and carried on ({said})"
        ),
    }[kind]
    return {
        "type": kind,
        "node": node,
        "file": first.file,
        "line": first.line,
        "when": first.when,
        "count": len(same),
        "text": first.text[-2000:],
        "explanation": f"{where}{again}: {why}: a bug of the system under test",
    }


def read_logs(logs: str | Path, own_logs: Iterable[str]) -> dict[str, str]:
    """The texts of the declared logs (`own_logs`: paths inside a node's folder) of every node
    folder under the run's `logs` folder, by "node/path"."""
    root = Path(logs)
    texts: dict[str, str] = {}
    if not root.is_dir():
        return texts
    for node in sorted(p for p in root.iterdir() if p.is_dir()):
        for rel in own_logs:
            path = node / rel
            if path.is_file():
                texts[f"{node.name}/{rel}"] = path.read_text(encoding="utf-8", errors="replace")
    return texts


def check(
    ops: Iterable[Op] | None = None, logs: str | None = None, own_logs: Sequence[str] = ()
) -> dict[str, Any]:
    """The verdict on a run's own-daemon logs: `logs`, the run's node folder; `own_logs`, the
    paths in each node's folder the kind declares its daemons log to. The history (`ops`) is
    not read: the logs are the evidence."""
    return judge(read_logs(logs, own_logs) if logs and own_logs else {})
