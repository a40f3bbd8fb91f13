"""Jepsen's history format (EDN) read into ours and written from it, so that one history can be
checked by Elle and by the harness and the verdicts compared.

Reading takes a file of EDN forms, each an operation map (or one vector of them), comments
allowed: keywords become their names (`:ok` → "ok", `[:append 1 2]` → ["append", 1, 2],
`:process :nemesis` → "nemesis"), a map's keys become text (a bank read `{0 10}` → {"0": 10},
a transfer `{:from 0 …}` → {"from": 0, …}), `nil` null and a set a list; a completed
transaction's read of `nil` found the key empty, []. A missing `:index` or
`:time` is the operation's position.

Writing does the reverse, as Jepsen writes histories: one map per line, `:type`, `:f` and a
transaction's micro-operation names as keywords, `:process` a number or `:nemesis`, maps whose
keys are all numbers with number keys (a bank read), others with keyword keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import edn_format
from edn_format import Keyword

from core.errors import BadInput

KEYWORD_FIELDS = ("type", "f", "workload")  # their values are keywords in Jepsen's histories


def plain(value: Any) -> Any:
    """An EDN value as JSON has it."""
    if isinstance(value, Keyword):
        return value.name
    if isinstance(value, Mapping):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Sequence):  # a vector or a list (edn_format's own immutable kinds)
        return [plain(v) for v in value]
    return str(value)  # symbols, chars, tagged values: their text


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of a Jepsen history file, in our operation model."""
    try:
        forms = edn_format.loads_all(path.read_text(encoding="utf-8"))
    except (edn_format.EDNDecodeError, UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"{path} is not an EDN history: {e}") from e
    if len(forms) == 1 and isinstance(forms[0], Sequence) and not isinstance(forms[0], str):
        forms = list(forms[0])
    events = []
    for position, op in enumerate(forms):
        if not isinstance(op, Mapping):
            raise BadInput(f"{path}: form {position + 1} is not an operation map: {op!r:.80}")
        event = {plain(k): plain(v) for k, v in op.items()}
        if event.get("f") == "txn" and event.get("type") == "ok":
            event["value"] = empty_reads(event.get("value"))
        event.setdefault("index", position)
        event["time"] = event.get("time") if isinstance(event.get("time"), int) else position
        if event.get("error") is not None and not isinstance(event["error"], str):
            event["error"] = edn_format.dumps(op[Keyword("error")])
        events.append(event)
    return events


def empty_reads(value: Any) -> Any:
    """In a completed transaction, a read of nil found the key empty (Jepsen's and Elle's
    reading); ours spells that []."""
    if not isinstance(value, list):
        return value
    return [
        ["r", m[1], []]
        if isinstance(m, list) and len(m) == 3 and m[0] == "r" and m[2] is None
        else m
        for m in value
    ]


def edn_value(value: Any, f: str | None = None) -> Any:
    """One of our values as Jepsen writes it."""
    if isinstance(value, Mapping):
        numeric = value and all(str(k).lstrip("-").isdigit() for k in value)
        return {(int(k) if numeric else Keyword(str(k))): edn_value(v) for k, v in value.items()}
    if isinstance(value, list):
        if f == "txn":
            return [
                [Keyword(m[0]), *(edn_value(x) for x in m[1:])]
                if isinstance(m, list) and m and isinstance(m[0], str)
                else edn_value(m)
                for m in value
            ]
        return [edn_value(v) for v in value]
    return value


def edn_event(event: Mapping[str, Any]) -> str:
    """One event as a line of Jepsen's history."""
    op: dict[Keyword, Any] = {}
    for key, value in event.items():
        if key in (*KEYWORD_FIELDS, "process") and isinstance(value, str):
            op[Keyword(key)] = Keyword(value)  # a process that is no number: :nemesis
        elif key == "value":
            op[Keyword(key)] = edn_value(value, event.get("f"))
        else:
            op[Keyword(key)] = edn_value(value)
    return edn_format.dumps(op)


def write_events(events: Iterable[Mapping[str, Any]], path: Path) -> int:
    """Write events as a Jepsen history file; returns how many."""
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for event in events:
            f.write(edn_event(event) + "\n")
            count += 1
    return count
