"""The cluster's own state, as it reported it during the run (cluster.jsonl), held to the seeds'
promises, as Jepsen reads a database's own records:

- `two-primaries`: two computes said at once that they serve clients (one writable primary);
- `term-below-commit`: a term started (its entry in a safekeeper's term history) below an LSN
  that a safekeeper had reported committed before that term was won: the new term's log lacks
  committed WAL (seed 003; Raft's leader completeness).

Also the takeovers: each time another compute begins to serve, with its term. Polls come about
once a second, so what lasts less may pass unseen; what is seen is never a guess.

`analyse` is the judgment on plain rounds (usable without Spark); `check` reads the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NS_PER_S = 1e9


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def analyse(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """`rounds`: [{"time": ns, "nodes": {node: state}}], in time order."""
    anomalies: list[dict[str, Any]] = []
    takeovers: list[dict[str, Any]] = []
    serving_before: tuple[str, ...] = ()
    committed = (0, "", 0)  # the highest commit LSN reported so far: lsn, node, time
    starts: dict[int, tuple[int, str, int]] = {}  # term → its start, where and when first seen
    max_term = 0
    for r in rounds:
        t, nodes = r["time"], r.get("nodes") or {}
        serving = tuple(sorted(n for n, s in nodes.items() if s.get("serving")))
        if len(serving) > 1 and serving != serving_before:
            terms = ", ".join(f"{n} (term {nodes[n].get('term')})" for n in serving)
            anomalies.append(
                {
                    "type": "two-primaries",
                    "window_ns": [t, t],
                    "nodes": list(serving),
                    "explanation": (
                        f"at {t / NS_PER_S:.1f} s {terms} each said it serves clients: only the "
                        "compute that leads the current term may"
                    ),
                }
            )
        for n in serving:
            if n not in serving_before and len(serving) == 1:
                takeovers.append({"time_s": t / NS_PER_S, "node": n, "term": nodes[n].get("term")})
        serving_before = serving
        for n, s in nodes.items():
            max_term = max(max_term, s.get("term") or 0)
            for term, start in s.get("history") or []:
                if term in starts:
                    continue
                starts[term] = (start, n, t)
                lsn, holder, seen = committed
                if start < lsn:
                    anomalies.append(
                        {
                            "type": "term-below-commit",
                            "window_ns": [seen, t],
                            "term": term,
                            "explanation": (
                                f"term {term} starts at {lsn_text(start)} ({n}'s term history at "
                                f"{t / NS_PER_S:.1f} s), below {lsn_text(lsn)}, which {holder} "
                                f"reported committed at {seen / NS_PER_S:.1f} s, before the term "
                                "was won: its log lacks committed WAL"
                            ),
                        }
                    )
        for n, s in nodes.items():
            if (s.get("commit_lsn") or 0) > committed[0]:
                committed = (s["commit_lsn"], n, t)
    return {
        "valid": not anomalies,
        "anomaly_types": sorted({a["type"] for a in anomalies}),
        "anomalies": anomalies,
        "rounds": len(rounds),
        "takeovers": takeovers,
        "terms_seen": len(starts),
        "max_term": max_term,
    }


def read_rounds(path: Path) -> list[dict[str, Any]]:
    """The rounds of a polls file; a last line cut off by a crash is skipped."""
    rounds = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rounds.append(json.loads(line))
        except ValueError:
            continue
    return rounds


def check(ops: Any, polls: str | None = None) -> dict[str, Any]:
    """The verdict on a run's polls file (`polls`); a history without one has nothing to check."""
    if polls is None or not Path(polls).is_file():
        return {"valid": True, "anomaly_types": [], "anomalies": [], "rounds": 0}
    return analyse(read_rounds(Path(polls)))
