"""The cluster's own state, as it reported it during the run (cluster.jsonl), held to the seeds'
promises, as Jepsen reads a database's own records:

- `two-primaries`: two computes said at once that they serve clients (one writable primary);
- `term-below-commit`: a term started (its entry in a safekeeper's term history, or in the
  epoch variant the VCL announced with it) below an LSN that a safekeeper had reported
  committed before that term was won: the new term's log lacks committed WAL (seed 003; Raft's
  leader completeness);
- `two-leaders-in-term`: two safekeepers' term histories give one term different starts (one
  proposer per term);
- `term-backwards`: a safekeeper's term went down between two polls (a term is durable before
  its vote is given);
- `log-divergence` (from the checksums the kind collects at the end of a run): two safekeepers
  hold different bytes over an LSN range below the commit LSN that both hold;
- `commit-beyond-quorum`: a safekeeper reported a commit LSN that, at the next poll, no quorum
  of the safekeepers' flush positions reached (one that did not answer counts as holding
  everything; a poll's answers are not one instant, so a commit is held to later flushes).

- `elections-without-faults`: more than MOST_QUIET_TERMS terms (or generations) began within
  QUIET_SPAN_S seconds while no fault was in place nor had healed in the last SETTLE_S
  seconds. A correct cluster elects when a leader fails; proposers that keep deposing each
  other (a compute that cannot continue the log standing again at once, a lease that never
  holds) serve in bursts between elections. The count is the term's rise between polls, so
  elections quicker than the polls still count.

- `deposed-primary-acknowledged` (Manatee, seed 004, whose peers say in which generation they
  were made primary): a write was acknowledged through a peer as primary of one generation
  though it began after a write of a later generation had been acknowledged through another:
  two peers acknowledged writes of different generations, one after its generation ended.

Also who led when, for the report's leader lane: `leaders`, the stretches of the run with the
same nodes leading (a compute that serves, or a node that takes writes, as Tarantool's), each
with its term where the kind has one (an empty stretch had none), and the takeovers: each time
a node begins to lead alone, when the last to lead alone was another or led another term.
Polls come about once a second, so what lasts less may pass unseen; what is seen is never a
guess.

`analyse` is the judgment on plain rounds (usable without Spark); `check` reads the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkers.availability import is_write
from checkers.operations import end_of, faults
from checkers.stats import fault_windows
from harness.history import NEMESIS

NS_PER_S = 1e9
SETTLE_S = 10.0  # after a fault heals, twice the failover timeout for the cluster to settle
QUIET_SPAN_S = 20.0
MOST_QUIET_TERMS = 3  # the correct cluster began none in quiet time; a duel begins two a second


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def leading(state: dict[str, Any]) -> bool:
    """A node leads when it serves clients as the primary, or takes writes."""
    return bool(state.get("serving") or state.get("writable"))


def term_of(state: dict[str, Any]) -> Any:
    """The term a node leads in; a Manatee peer says `generation` instead (the generation in
    which it was made primary)."""
    return state.get("term", state.get("generation"))


def leaders(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run cut where the leading nodes or their terms change: [{"start": s, "end": s or
    None (to the end of the run), "nodes": [node], "term": the term or None, "unit": "term" or
    "generation", what the kind calls it}]."""
    stretches: list[dict[str, Any]] = []
    for r in rounds:
        nodes = r.get("nodes") or {}
        who = sorted(n for n, s in nodes.items() if leading(s))
        terms = sorted({term_of(nodes[n]) for n in who} - {None})
        term = terms[-1] if terms else None
        unit = "generation" if any("generation" in nodes[n] for n in who) else "term"
        t = r["time"] / NS_PER_S
        if stretches and (stretches[-1]["nodes"], stretches[-1]["term"]) == (who, term):
            continue
        if stretches:
            stretches[-1]["end"] = t
        stretches.append({"start": t, "end": None, "nodes": who, "term": term, "unit": unit})
    return stretches


def analyse(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """`rounds`: [{"time": ns, "nodes": {node: state}}], in time order."""
    anomalies: list[dict[str, Any]] = []
    takeovers: list[dict[str, Any]] = []
    serving_before: tuple[str, ...] = ()
    last_alone: tuple[str, Any] | None = None  # the last node to lead alone, and its term
    committed = (0, "", 0)  # the highest commit LSN reported so far: lsn, node, time
    starts: dict[int, tuple[int, str, int]] = {}  # term → its start, where and when first seen
    max_term = 0
    terms: dict[str, tuple[int, int]] = {}  # safekeeper → its last term, and when
    keepers = sorted(
        {n for r in rounds for n, s in (r.get("nodes") or {}).items() if "history" in s}
    )
    reported: dict[str, tuple[int, int]] = {}  # each safekeeper's commit LSN last round, and when
    for r in rounds:
        t, nodes = r["time"], r.get("nodes") or {}
        anomalies += _per_round(t, nodes, terms, keepers, reported)
        serving = tuple(sorted(n for n, s in nodes.items() if s.get("serving")))
        if len(serving) > 1 and serving != serving_before:
            who = ", ".join(f"{n} (term {nodes[n].get('term')})" for n in serving)
            anomalies.append(
                {
                    "type": "two-primaries",
                    "window_ns": [t, t],
                    "nodes": list(serving),
                    "explanation": (
                        f"at {t / NS_PER_S:.1f} s {who} each said it serves clients: only the "
                        "compute that leads the current term may"
                    ),
                }
            )
        led = [n for n, s in nodes.items() if leading(s)]
        if len(led) == 1 and (led[0], term_of(nodes[led[0]])) != last_alone:
            last_alone = (led[0], term_of(nodes[led[0]]))
            takeovers.append({"time_s": t / NS_PER_S, "node": led[0], "term": last_alone[1]})
        serving_before = serving
        for n, s in nodes.items():
            max_term = max(max_term, s.get("term") or 0)
            source = "term history" if s.get("history") else "announced VCL"
            for term, start in term_starts(s):
                if term in starts:
                    first, where, when = starts[term]
                    if start != first:
                        anomalies.append(
                            {
                                "type": "two-leaders-in-term",
                                "window_ns": [when, t],
                                "term": term,
                                "explanation": (
                                    f"term {term} starts at {lsn_text(first)} in {where}'s term "
                                    f"history ({when / NS_PER_S:.1f} s) and at {lsn_text(start)} "
                                    f"in {n}'s ({t / NS_PER_S:.1f} s): two proposers wrote in it"
                                ),
                            }
                        )
                        starts[term] = (start, n, t)  # report each disagreement once
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
                                f"term {term} starts at {lsn_text(start)} ({n}'s {source} at "
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
        "leaders": leaders(rounds),
        "terms_seen": len(starts),
        "max_term": max_term,
    }


def term_starts(state: dict[str, Any]) -> list[list[int]]:
    """Where each term's log starts, as a safekeeper says: its term history, or in the epoch
    variant (which keeps none) the term last announced to it and that term's VCL, so that a
    term won below committed WAL is seen in both variants."""
    starts = list(state.get("history") or [])
    epoch, vcl = state.get("proposed_epoch") or 0, state.get("vcl") or 0
    if epoch and vcl and not starts:
        starts.append([epoch, vcl])
    return starts


def _per_round(
    t: int,
    nodes: dict[str, dict[str, Any]],
    terms: dict[str, tuple[int, int]],
    keepers: list[str],
    reported: dict[str, tuple[int, int]],
) -> list[dict[str, Any]]:
    """The invariants one round shows on its own, or against the safekeepers' last terms."""
    found = []
    polled = {n: s for n, s in nodes.items() if "history" in s}
    for n, s in polled.items():
        term = s.get("term") or 0
        before, when = terms.get(n, (0, t))
        if term < before:
            found.append(
                {
                    "type": "term-backwards",
                    "window_ns": [when, t],
                    "explanation": (
                        f"{n}'s term went from {before} ({when / NS_PER_S:.1f} s) down to {term} "
                        f"({t / NS_PER_S:.1f} s): a promise it gave was not durable"
                    ),
                }
            )
        terms[n] = (term, t)
    if polled:
        quorum = len(keepers) // 2 + 1
        # a safekeeper that did not answer this round may hold everything
        flushes = [(polled[n].get("flush_lsn") or 0) if n in polled else 1 << 62 for n in keepers]
        held = sorted(flushes, reverse=True)[quorum - 1]
        # a round's answers are not one instant: a commit is held to the flushes polled after it
        for n, (commit, when) in list(reported.items()):
            if commit > held:
                found.append(
                    {
                        "type": "commit-beyond-quorum",
                        "window_ns": [when, t],
                        "explanation": (
                            f"{n} reported {lsn_text(commit)} committed at {when / NS_PER_S:.1f} "
                            f"s, but at {t / NS_PER_S:.1f} s no quorum of the safekeepers held "
                            f"WAL past {lsn_text(held)}: committed WAL was lost, and with it "
                            "every commit acknowledged in it"
                        ),
                    }
                )
        reported.clear()
        reported.update({n: (s.get("commit_lsn") or 0, t) for n, s in polled.items()})
    return found


def read_rounds(path: Path) -> list[dict[str, Any]]:
    """The rounds of a polls file; a last line cut off by a crash is skipped."""
    rounds = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rounds.append(json.loads(line))
        except ValueError:
            continue
    return rounds


def divergence(collected: dict[str, Any]) -> list[dict[str, Any]]:
    """`log-divergence`: two safekeepers whose checksums of one LSN range, below the commit LSN
    and held whole by both, differ (`collected`: the kind's WAL digests at the end of a run)."""
    by_range: dict[tuple[int, int], dict[str, str]] = {}
    for node, chunks in (collected.get("digests") or {}).items():
        for lo, hi, digest in chunks:
            by_range.setdefault((lo, hi), {})[node] = digest
    found = []
    commit = collected.get("commit_lsn") or 0
    for (lo, hi), held in sorted(by_range.items()):
        if len(set(held.values())) > 1:
            groups: dict[str, list[str]] = {}
            for node, digest in sorted(held.items()):
                groups.setdefault(digest, []).append(node)
            sides = " | ".join(" ".join(nodes) for nodes in groups.values())
            found.append(
                {
                    "type": "log-divergence",
                    "lsn_range": [lo, hi],
                    "explanation": (
                        f"the safekeepers hold different WAL in {lsn_text(lo)}–{lsn_text(hi)}, "
                        f"below the commit LSN {lsn_text(commit)} ({sides}): the committed log "
                        "is not one"
                    ),
                }
            )
            if len(found) >= 10:
                break
    return found


def generations(rounds: list[dict[str, Any]]) -> dict[str, list[tuple[int, int | None]]]:
    """Per node, from the polls: [(time, the generation it took writes in, or None)]; empty
    unless the nodes say `generation` (a Manatee cluster)."""
    seen: dict[str, list[tuple[int, int | None]]] = {}
    for r in rounds:
        for n, s in (r.get("nodes") or {}).items():
            if "generation" in s:
                seen.setdefault(n, []).append((r["time"], s["generation"] if leading(s) else None))
    return seen


def deposed_acknowledged(
    rounds: list[dict[str, Any]], writes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`deposed-primary-acknowledged`: of the acknowledged writes (plain operations), each
    given the generation its peer last said it took writes in when the write completed, one
    of an earlier generation that began after one of a later generation had been acknowledged.
    Writes whose peer was not seen taking writes are left out: polls come once a second."""
    per_node = generations(rounds)
    if not per_node:
        return []
    dated = []
    for op in writes:
        polled = per_node.get(op.get("node") or "", [])
        done = op["complete_time"]
        before = [g for t, g in polled if t <= done]
        if before and before[-1] is not None:
            dated.append((before[-1], op))
    found: list[dict[str, Any]] = []
    by_completion = sorted(dated, key=lambda d: d[1]["complete_time"])
    latest: tuple[int, dict[str, Any]] | None = None  # the highest generation acknowledged so far
    i = 0
    for generation, op in sorted(dated, key=lambda d: d[1]["invoke_time"]):
        while i < len(by_completion) and by_completion[i][1]["complete_time"] < op["invoke_time"]:
            if latest is None or by_completion[i][0] > latest[0]:
                latest = by_completion[i]
            i += 1
        if latest is not None and latest[0] > generation and len(found) < 10:
            later_gen, later = latest
            found.append(
                {
                    "type": "deposed-primary-acknowledged",
                    "ops": [later, op],
                    "window_ns": [later["complete_time"], op["complete_time"]],
                    "explanation": (
                        f"{op['node']}, primary of generation {generation}, acknowledged the "
                        f"write at index {op['invoke_index']} ({op['complete_time'] / NS_PER_S:.1f}"
                        f" s), which began at {op['invoke_time'] / NS_PER_S:.1f} s, after "
                        f"{later['node']} had acknowledged the write at index "
                        f"{later['invoke_index']} in generation {later_gen} "
                        f"({later['complete_time'] / NS_PER_S:.1f} s): two peers acknowledged "
                        "writes of different generations, the older after its generation ended"
                    ),
                }
            )
    return found


def elections_without_faults(
    rounds: list[dict[str, Any]], windows: list[tuple[float, float]]
) -> list[dict[str, Any]]:
    """`windows`: when faults were in place (s). A rise of the term between two polls counts
    only when the whole stretch between them was quiet: no fault, none healed within
    SETTLE_S."""

    def quiet(a: float, b: float) -> bool:
        return all(b <= start or a >= end + SETTLE_S for start, end in windows)

    rises: list[tuple[float, float, int]] = []  # quiet poll intervals: from, to, terms begun
    before: tuple[float, int] | None = None
    for r in rounds:
        t = r["time"] / NS_PER_S
        term = max((term_of(s) or 0 for s in (r.get("nodes") or {}).values()), default=0)
        if before is not None and term > before[1] and quiet(before[0], t):
            rises.append((before[0], t, term - before[1]))
        if before is None or term >= before[1]:
            before = (t, term)
    duels: list[list[float]] = []  # [from, to], overlapping spans merged
    first = 0
    for last in range(len(rises)):
        while rises[last][1] - rises[first][0] > QUIET_SPAN_S:
            first += 1
        a, b = rises[first][0], rises[last][1]
        if sum(n for _, _, n in rises[first : last + 1]) <= MOST_QUIET_TERMS:
            continue
        if duels and duels[-1][1] >= a:
            duels[-1][1] = b
        else:
            duels.append([a, b])
    found = []
    for a, b in duels:
        count = sum(n for x, y, n in rises if a <= x and y <= b)
        healed = max((end for _, end in windows if end <= a), default=None)
        since = f"the last fault healed at {healed:.1f} s" if healed is not None else "none yet"
        found.append(
            {
                "type": "elections-without-faults",
                "window_ns": [a * NS_PER_S, b * NS_PER_S],
                "elections": count,
                "explanation": (
                    f"from {a:.1f} s to {b:.1f} s, with no fault in place ({since}), {count} "
                    "terms began: a correct cluster elects when its leader fails, and here "
                    "nothing failed; its proposers kept deposing each other"
                ),
            }
        )
    return found


def check(ops: Any, polls: str | None = None, digests: str | None = None) -> dict[str, Any]:
    """The verdict on a run's polls file (`polls`) and end-of-run WAL checksums (`digests`),
    and, where the polls give generations, on its acknowledged writes (`ops`: plain
    operations, or only the nemesis's and the acknowledged writes: the faults' windows tell
    when the cluster was left alone); a history without them has nothing to check."""
    result: dict[str, Any] = {"valid": True, "anomaly_types": [], "anomalies": [], "rounds": 0}
    if polls is not None and Path(polls).is_file():
        rounds = read_rounds(Path(polls))
        result = analyse(rounds)
        ops = list(ops or [])
        end = max([end_of(ops) or 0, *(r["time"] for r in rounds[-1:])])
        windows = [(w["start"], w["end"]) for w in fault_windows(faults(ops), end)]
        result["anomalies"] += elections_without_faults(rounds, windows)
        if generations(rounds):
            writes = [op for op in ops if op["type"] == "ok" and op["process"] != NEMESIS
                      and is_write(op)]  # fmt: skip
            result["anomalies"] += deposed_acknowledged(rounds, writes)
    if digests is not None and Path(digests).is_file():
        collected = json.loads(Path(digests).read_text() or "{}")
        result["anomalies"] += divergence(collected)
        result["wal_compared"] = {
            "ranges": len(
                {tuple(c[:2]) for cs in collected.get("digests", {}).values() for c in cs}
            ),
            "upto_lsn": collected.get("commit_lsn"),
        }
    result["anomaly_types"] = sorted({a["type"] for a in result["anomalies"]})
    result["valid"] = not result["anomalies"]
    return result
