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

- `lost-acknowledged-write` and `acknowledged-write-beyond-quorum` (from the WAL position each
  acknowledged write recorded, `lsn`: its commit record ends past it): at a poll sent after the
  write was acknowledged, no safekeeper held WAL that far (the write is gone), or fewer than a
  quorum did (one more failure loses it). An acknowledgement promises the write is on a
  quorum's disks; a correct safekeeper's flush position never falls below what it acknowledged
  (its disk keeps what it synced, and it truncates only what was never committed).

- `vclock-backwards` (Tarantool, whose instances report their vclocks): a component of an
  instance's vclock (how far it has applied one instance's writes; component 0, its local
  changes, is left out) went down between two polls: transactions it had written to its WAL,
  and may have acknowledged to a quorum, are gone.

- Manatee's cluster state in ZooKeeper (seed 004), polled as the entry COORDINATION: G only
  grows (`generation-backwards`); P, S and init_wal are immutable within a generation
  (`generation-rewritten`); the peer that declares G+1, its P, was P or S of G
  (`takeover-by-outsider`); init_wal, a position in P's WAL, never goes back from one
  generation to the next (`init-wal-backwards`); and P is never its own S (`primary-is-sync`).

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

import bisect
import json
from pathlib import Path
from typing import Any

from checkers.availability import is_write
from checkers.operations import end_of, faults
from checkers.stats import fault_windows
from harness.history import NEMESIS
from harness.polls import COORDINATION

NS_PER_S = 1e9
SETTLE_S = 10.0  # after a fault heals, twice the failover timeout for the cluster to settle
QUIET_SPAN_S = 20.0
MOST_QUIET_TERMS = 3  # the correct cluster began none in quiet time; a duel begins two a second
MOST_NAMED = 10  # acknowledged writes listed in one anomaly (its count says how many in all)


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
    keepers = keepers_of(rounds)
    reported: dict[str, tuple[int, int]] = {}  # each safekeeper's commit LSN last round, and when
    vclocks: dict[str, tuple[dict[str, int], int]] = {}  # each instance's last vclock, and when
    declared: list[tuple[dict[str, Any], int]] = []  # the last cluster state seen, and when
    for r in rounds:
        t, nodes = r["time"], r.get("nodes") or {}
        anomalies += _per_round(t, nodes, terms, keepers, reported)
        anomalies += _vclocks_backwards(t, nodes, vclocks)
        anomalies += _generation_rules(t, nodes.get(COORDINATION), declared)
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


def _vclocks_backwards(
    t: int, nodes: dict[str, dict[str, Any]], last: dict[str, tuple[dict[str, int], int]]
) -> list[dict[str, Any]]:
    """`vclock-backwards`: instances whose vclock has a replicated component lower than at
    their last poll."""
    found = []
    for n, s in nodes.items():
        if "vclock" not in s:
            continue
        now = {str(k): int(v) for k, v in (s["vclock"] or {}).items()}
        before, when = last.get(n, ({}, t))
        fell = sorted(
            (k, v, now.get(k, 0)) for k, v in before.items() if k != "0" and now.get(k, 0) < v
        )
        if fell:
            which = "; ".join(f"component {k} from {a} to {b}" for k, a, b in fell)
            found.append(
                {
                    "type": "vclock-backwards",
                    "window_ns": [when, t],
                    "explanation": (
                        f"{n}'s vclock went back between {when / NS_PER_S:.1f} s and "
                        f"{t / NS_PER_S:.1f} s ({which}): transactions it had written to its "
                        "WAL are gone"
                    ),
                }
            )
        last[n] = (now, t)
    return found


def _generation_rules(
    t: int, said: dict[str, Any] | None, declared: list[tuple[dict[str, Any], int]]
) -> list[dict[str, Any]]:
    """Seed 004's rules, from this round's cluster state against the last one seen, each time
    it changes."""
    state = (said or {}).get("cluster_state")
    if not state or (declared and state == declared[-1][0]):
        return []
    g, p, sync, wal = (state.get(k) for k in ("generation", "primary", "sync", "init_wal"))
    found: list[tuple[str, str]] = []
    if p is not None and p == sync:
        found.append(("primary-is-sync", f"{p} is both P and S of generation {g}"))
    if declared:
        before, when = declared[-1]
        g0, p0, s0, wal0 = (before.get(k) for k in ("generation", "primary", "sync", "init_wal"))
        was = f"generation {g0} (P {p0}, S {s0}, init_wal {wal0}) at {when / NS_PER_S:.1f} s"
        now = f"generation {g} (P {p}, S {sync}, init_wal {wal})"
        if g < g0:
            found.append(("generation-backwards", f"{was}, then {now}: G went back"))
        elif g == g0 and (p, sync, wal) != (p0, s0, wal0):
            found.append(("generation-rewritten", f"{was}, then {now}: P, S and init_wal "
                          "are fixed for a generation's life"))  # fmt: skip
        elif g == g0 + 1 and p not in (p0, s0):
            found.append(("takeover-by-outsider", f"{was}, then {now}: only P or S of a "
                          "generation may declare the next"))  # fmt: skip
        if g > g0 and wal is not None and wal0 is not None and wal < wal0:
            found.append(("init-wal-backwards", f"{was}, then {now}: init_wal, a position in "
                          "P's WAL when the generation began, went back"))  # fmt: skip
    since = declared[-1][1] if declared else t
    declared[:] = [(state, t)]
    return [_rule(kind, why, since, t) for kind, why in found]


def _rule(kind: str, why: str, since: int, t: int) -> dict[str, Any]:
    return {
        "type": kind,
        "window_ns": [since, t],
        "explanation": f"ZooKeeper's cluster state at {t / NS_PER_S:.1f} s: {why}",
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


def keepers_of(rounds: list[dict[str, Any]]) -> list[str]:
    """The safekeepers: the nodes that report a term history."""
    return sorted({n for r in rounds for n, s in (r.get("nodes") or {}).items() if "history" in s})


def unreplicated_acknowledged(
    rounds: list[dict[str, Any]], writes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The acknowledged writes (plain operations with their `lsn`) that a poll sent after their
    acknowledgement found beyond what a quorum of the safekeepers held, each named once: at
    most two anomalies a poll (none held it; fewer than a quorum did), with up to
    MOST_NAMED of its writes. A safekeeper that did not answer may hold everything. Polls
    without `begun` (written before it was recorded) are passed over."""
    keepers = keepers_of(rounds)
    quorum = len(keepers) // 2 + 1
    acked = sorted((op for op in writes if op.get("lsn") is not None),
                   key=lambda op: op["complete_time"])  # fmt: skip
    pending: list[tuple[int, int]] = []  # (lsn, position in acked) of writes not yet named
    i = 0
    found: list[dict[str, Any]] = []
    for r in rounds:
        begun, nodes = r.get("begun"), r.get("nodes") or {}
        if begun is None or not any(n in nodes for n in keepers):
            continue
        while i < len(acked) and acked[i]["complete_time"] < begun:
            bisect.insort(pending, (acked[i]["lsn"], i))
            i += 1
        flushes = {n: (nodes[n].get("flush_lsn") or 0) if n in nodes else None for n in keepers}
        reach = sorted((1 << 62 if f is None else f for f in flushes.values()), reverse=True)
        beyond = bisect.bisect_right(pending, (reach[quorum - 1], len(acked)))
        if beyond == len(pending):
            continue
        gone = bisect.bisect_right(pending, (reach[0], len(acked)))
        named = [acked[at] for _, at in pending[beyond:]]
        del pending[beyond:]
        split = gone - beyond
        for kind, ops in (
            ("acknowledged-write-beyond-quorum", named[:split]),
            ("lost-acknowledged-write", named[split:]),
        ):
            if ops:
                found.append(_beyond_quorum(kind, ops, r, flushes, quorum))
    return found


def _beyond_quorum(
    kind: str,
    ops: list[dict[str, Any]],
    r: dict[str, Any],
    flushes: dict[str, int | None],
    quorum: int,
) -> dict[str, Any]:
    first = ops[0]
    held = ", ".join(f"{n} {'no answer' if f is None else lsn_text(f)}" for n, f in flushes.items())
    fate = (
        "no safekeeper holds its WAL: the acknowledged write is lost"
        if kind == "lost-acknowledged-write"
        else f"fewer than a quorum ({quorum}) hold it: one more failure loses it"
    )
    others = f" (and {len(ops) - 1} more acknowledged writes)" if len(ops) > 1 else ""
    return {
        "type": kind,
        "ops": ops[:MOST_NAMED],
        "count": len(ops),
        "window_ns": [first["complete_time"], r["time"]],
        "explanation": (
            f"the write at index {first['invoke_index']} ({first['f']} "
            f"{json.dumps(first.get('invoke_value'))}), acknowledged by {first.get('node')} at "
            f"{first['complete_time'] / NS_PER_S:.1f} s with its WAL past "
            f"{lsn_text(first['lsn'])}{others}, was not on a quorum's disks at "
            f"{r['time'] / NS_PER_S:.1f} s (flush positions: {held}): {fate}"
        ),
    }


def check(ops: Any, polls: str | None = None, digests: str | None = None) -> dict[str, Any]:
    """The verdict on a run's polls file (`polls`) and end-of-run WAL checksums (`digests`),
    and on its acknowledged writes where they recorded WAL positions or the polls give
    generations (`ops`: plain operations, or only the nemesis's and the acknowledged writes:
    the faults' windows tell when the cluster was left alone); a history without them has
    nothing to check."""
    result: dict[str, Any] = {"valid": True, "anomaly_types": [], "anomalies": [], "rounds": 0}
    if polls is not None and Path(polls).is_file():
        rounds = read_rounds(Path(polls))
        result = analyse(rounds)
        ops = list(ops or [])
        end = max([end_of(ops) or 0, *(r["time"] for r in rounds[-1:])])
        windows = [(w["start"], w["end"]) for w in fault_windows(faults(ops), end)]
        result["anomalies"] += elections_without_faults(rounds, windows)
        acked = [op for op in ops if op["type"] == "ok" and op.get("lsn") is not None]
        result["anomalies"] += unreplicated_acknowledged(rounds, acked)
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
