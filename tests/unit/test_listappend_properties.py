"""Properties of the list-append checker on generated histories.

Serial executions are valid by construction: random transactions are run one after another
against an in-memory dict of lists, which fills in what each read returns, so the checker must
find nothing in them (and the same with transactions that fail, or never complete and may or may
not have taken effect). Then one perturbation of such a history creates a known anomaly (a stale
read after a completed append, write skew, a duplicate element, two elements out of order, an
aborted write that was read), and the checker must name it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from checkers.listappend import check
from checkers.listappend.history import Txn

KEYS = ("x", "y", "z")
PROCESSES = 3
TICK = 1_000  # ns between two history events
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)

Mop = tuple[str, Any, Any]
Program = list[tuple[Mop, ...]]  # each transaction's micro-ops; reads not filled in yet


@st.composite
def programs(draw: st.DrawFn, min_txns: int = 1, max_txns: int = 12) -> Program:
    """Transactions over a few keys: appends (each value unique in its key) and reads."""
    keys = KEYS[: draw(st.integers(1, len(KEYS)))]
    mop = st.tuples(st.sampled_from(("r", "append")), st.sampled_from(keys))
    shapes = draw(
        st.lists(st.lists(mop, min_size=1, max_size=4), min_size=min_txns, max_size=max_txns)
    )
    counter = dict.fromkeys(keys, 0)
    program = []
    for shape in shapes:
        mops = []
        for f, k in shape:
            if f == "append":
                counter[k] += 1
                mops.append(("append", k, counter[k]))
            else:
                mops.append(("r", k, None))
        program.append(tuple(mops))
    return program


def execute(state: dict[Any, list[Any]], mops: Sequence[Mop]) -> tuple[Mop, ...]:
    """Run one transaction against `state` (in place); its mops with the reads filled in."""
    out = []
    for f, k, v in mops:
        if f == "append":
            state.setdefault(k, []).append(v)
            out.append((f, k, v))
        else:
            out.append((f, k, tuple(state.get(k, ()))))
    return tuple(out)


def run_serially(program: Program) -> list[tuple[Mop, ...]]:
    state: dict[Any, list[Any]] = {}
    return [execute(state, mops) for mops in program]


def unread(mops: Sequence[Mop]) -> tuple[Mop, ...]:
    """What the history holds of a transaction whose results never came back: no read values."""
    return tuple((f, k, v if f == "append" else None) for f, k, v in mops)


def assemble(
    events: Sequence[tuple[str, int]], ops: dict[int, tuple[str, int, tuple[Mop, ...]]]
) -> list[Txn]:
    """Transactions from history events ("invoke"/"complete", op) in order; each op is (type,
    process, mops). An op with no completion never completed (info)."""
    invoked: dict[int, int] = {}
    completed: dict[int, int] = {}
    for position, (what, n) in enumerate(events):
        (invoked if what == "invoke" else completed)[n] = position
    return [
        Txn(
            index=invoked[n],
            complete=completed.get(n, invoked[n]),
            process=process,
            type=type_,
            start=invoked[n] * TICK,
            end=completed[n] * TICK if n in completed else None,
            mops=mops,
        )
        for n, (type_, process, mops) in ops.items()
    ]


def serial(executed: Sequence[tuple[Mop, ...]], processes: Sequence[int]) -> list[Txn]:
    """All ok, each invoked after the previous one completed."""
    events = [e for n in range(len(executed)) for e in (("invoke", n), ("complete", n))]
    ops = {n: ("ok", processes[n % len(processes)], mops) for n, mops in enumerate(executed)}
    return assemble(events, ops)


def processes() -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, PROCESSES - 1), min_size=1, max_size=12)


def observed_another(txns: Sequence[Txn]) -> bool:
    """Whether some ok read saw an element that another transaction appended."""
    writer = {(k, v): t.index for t in txns for f, k, v in t.mops if f == "append"}
    return any(
        writer.get((k, x), t.index) != t.index
        for t in txns
        if t.type == "ok"
        for f, k, v in t.mops
        if f == "r" and v
        for x in v
    )


VALID_MODELS = ("strict-serializable", "serializable", "strong-session-serializable")


def assert_valid(txns: list[Txn]) -> None:
    for model in VALID_MODELS:
        result = check(txns, model)
        found = set(result["anomaly_types"]) | set(result["other_anomaly_types"])
        if result["valid"] == "unknown":
            assert result["anomaly_types"] == ["empty-transaction-graph"], (model, result)
            assert not observed_another(txns), (model, result)
        else:
            assert result["valid"] is True, (model, result, txns)
        assert found <= {"empty-transaction-graph"}, (model, result, txns)
        assert result["not"] == [] and result["also_not"] == [], (model, result)


# --- 1. serial executions are valid ---------------------------------------------------------


@SETTINGS
@given(programs(), processes())
def test_serial_execution_is_valid(program: Program, procs: list[int]) -> None:
    txns = serial(run_serially(program), procs)
    event(f"a read saw another transaction's append: {observed_another(txns)}")
    assert_valid(txns)


FATES = ("ok", "ok", "ok", "fail", "info-applied", "info-lost")


@st.composite
def histories_with_failures(draw: st.DrawFn) -> list[Txn]:
    """A serial execution where some transactions failed (no effect), and some never completed
    (info): these are invoked at some point and either take effect, atomically, at their place
    in the serial order at or after that point, or never. At the end of the history an info
    transaction's effects are unobservable; earlier, later transactions may see them."""
    program = draw(programs())
    n = len(program)
    fates = draw(st.lists(st.sampled_from(FATES), min_size=n, max_size=n))
    procs = draw(processes())
    invoke_at: dict[int, int] = {}  # info op → it is invoked just before op (slot) runs
    for i, fate in enumerate(fates):
        if fate == "info-applied":
            invoke_at[i] = draw(st.integers(0, i))
        elif fate == "info-lost":
            invoke_at[i] = draw(st.integers(0, n))
    state: dict[Any, list[Any]] = {}
    events: list[tuple[str, int]] = []
    ops: dict[int, tuple[str, int, tuple[Mop, ...]]] = {}
    for i, (mops, fate) in enumerate(zip(program, fates, strict=True)):
        events += [("invoke", j) for j, slot in invoke_at.items() if slot == i]
        if fate == "ok":
            ops[i] = ("ok", procs[i % len(procs)], execute(state, mops))
        elif fate == "fail":
            ops[i] = ("fail", procs[i % len(procs)], unread(mops))
        else:  # a crashed client's process is never reused
            if fate == "info-applied":
                execute(state, mops)
            ops[i] = ("info", PROCESSES + i, unread(mops))
        if fate in ("ok", "fail"):
            events += [("invoke", i), ("complete", i)]
    events += [("invoke", j) for j, slot in invoke_at.items() if slot == n]
    return assemble(events, ops)


@SETTINGS
@given(histories_with_failures())
def test_serial_execution_with_failed_and_indeterminate_transactions_is_valid(
    txns: list[Txn],
) -> None:
    appended = {(k, v): t.type for t in txns for f, k, v in t.mops if f == "append"}
    seen = {appended[(k, x)] for t in txns for f, k, v in t.mops if f == "r" and v for x in v}
    event(f"an ok read saw an info append: {'info' in seen}")
    assert_valid(txns)


@SETTINGS
@given(programs(), processes(), st.data())
def test_serial_execution_with_indeterminate_tail_is_valid(
    program: Program, procs: list[int], data: st.DataObject
) -> None:
    """The brief's case in its plainest form: the last transactions crashed, all invoked after
    the others completed; whether they took effect cannot be seen, their reads are unknown."""
    executed = run_serially(program)
    done = len(executed) - data.draw(st.integers(0, len(executed)))
    events = [e for n in range(done) for e in (("invoke", n), ("complete", n))]
    events += [("invoke", n) for n in range(done, len(executed))]
    ops = {n: ("ok", procs[n % len(procs)], mops) for n, mops in enumerate(executed[:done])}
    ops |= {n: ("info", PROCESSES + n, unread(executed[n])) for n in range(done, len(executed))}
    txns = assemble(events, ops)
    assert_valid(txns)


# --- 2. one perturbation, one anomaly ---------------------------------------------------------


def reads(executed: Sequence[tuple[Mop, ...]]) -> list[tuple[int, int, Any, tuple[Any, ...]]]:
    """Every read as (transaction, mop position, key, value)."""
    return [
        (ti, mi, k, v)
        for ti, mops in enumerate(executed)
        for mi, (f, k, v) in enumerate(mops)
        if f == "r"
    ]


def writers(executed: Sequence[tuple[Mop, ...]]) -> dict[tuple[Any, Any], int]:
    return {(k, v): ti for ti, mops in enumerate(executed) for f, k, v in mops if f == "append"}


def with_read(
    executed: Sequence[tuple[Mop, ...]], ti: int, mi: int, value: tuple[Any, ...]
) -> list[tuple[Mop, ...]]:
    out = list(executed)
    mops = list(out[ti])
    mops[mi] = ("r", mops[mi][1], value)
    out[ti] = tuple(mops)
    return out


@SETTINGS
@given(programs(min_txns=2), processes(), st.data())
def test_stale_read_after_completed_append_is_realtime_anomaly(
    program: Program, procs: list[int], data: st.DataObject
) -> None:
    """A read misses the last element it saw, appended by a transaction that completed before
    the reader began: fine for serializable (the reader may be ordered first) unless the data
    says otherwise, never for strict serializable."""
    executed = run_serially(program)
    writer = writers(executed)
    candidates = [(ti, mi, v) for ti, mi, k, v in reads(executed) if v and writer[(k, v[-1])] != ti]
    assume(candidates)
    ti, mi, v = data.draw(st.sampled_from(candidates))
    txns = serial(with_read(executed, ti, mi, v[:-1]), procs)
    strict = check(txns, "strict-serializable")
    assert strict["valid"] is False, strict
    serializable = check(txns, "serializable")
    # lost-append (ours, under every model) fires when the stale read is its key's last read
    if set(serializable["anomaly_types"]) <= {"lost-append"}:
        event("only real time rules the stale read out")
        assert "G-single-item-realtime" in strict["anomaly_types"], (strict, txns)
    # every cycle goes through the one backward edge, reader -rw-> writer: with only data edges
    # it is a G-single-item, and if there is none, real time closes one
    assert {"G-single-item", "G-single-item-realtime"} & set(strict["anomaly_types"]), strict


@SETTINGS
@given(programs(), processes(), st.data())
def test_write_skew_is_g2_item(program: Program, procs: list[int], data: st.DataObject) -> None:
    """Two concurrent transactions each read the key the other appends to, both from the state
    before either append: G2-item, forbidden by serializable and allowed by snapshot isolation."""
    at = data.draw(st.integers(0, len(program)))
    x, y = data.draw(st.permutations(KEYS))[:2]
    state: dict[Any, list[Any]] = {}
    before = [execute(state, mops) for mops in program[:at]]
    a = (("r", x, tuple(state.get(x, ()))), ("append", y, 1000))
    b = (("r", y, tuple(state.get(y, ()))), ("append", x, 1000))
    execute(state, a)
    execute(state, b)
    after = [execute(state, mops) for mops in program[at:]]
    executed = [*before, a, b, *after]
    ops = {n: ("ok", procs[n % len(procs)], mops) for n, mops in enumerate(executed)}
    ops[at + 1] = ("ok", PROCESSES, b)  # a and b overlap: give them different processes
    ops[at] = ("ok", PROCESSES + 1, a)
    first, second = data.draw(st.permutations([at, at + 1]))
    events = [e for n in range(at) for e in (("invoke", n), ("complete", n))]
    events += [("invoke", first), ("invoke", second)]
    events += [("complete", n) for n in data.draw(st.permutations([at, at + 1]))]
    events += [e for n in range(at + 2, len(executed)) for e in (("invoke", n), ("complete", n))]
    txns = assemble(events, ops)

    serializable = check(txns, "serializable")
    assert serializable["valid"] is False, serializable
    assert "G2-item" in serializable["anomaly_types"], (serializable, txns)
    assert check(txns, "strict-serializable")["valid"] is False
    si = check(txns, "snapshot-isolation")
    assert si["valid"] is True, (si, txns)


@SETTINGS
@given(
    programs(),
    processes(),
    st.sampled_from(("read-uncommitted", "serializable", "strict-serializable")),
    st.data(),
)
def test_duplicate_element_in_read(
    program: Program, procs: list[int], model: str, data: st.DataObject
) -> None:
    executed = run_serially(program)
    candidates = [(ti, mi, v) for ti, mi, _, v in reads(executed) if v]
    assume(candidates)
    ti, mi, v = data.draw(st.sampled_from(candidates))
    element = data.draw(st.sampled_from(v))
    at = data.draw(st.integers(0, len(v)))
    txns = serial(with_read(executed, ti, mi, (*v[:at], element, *v[at:])), procs)
    result = check(txns, model)
    assert result["valid"] is False, result
    assert "duplicate-elements" in result["anomaly_types"], result


@SETTINGS
@given(programs(min_txns=3), processes(), st.data())
def test_reordered_read_is_incompatible_order(
    program: Program, procs: list[int], data: st.DataObject
) -> None:
    """Two elements of a read swapped, where another read of the key reaches the first of them:
    the two reads cannot both be prefixes of one version order."""
    executed = run_serially(program)
    all_reads = reads(executed)
    candidates = []
    for ti, mi, k, v in all_reads:
        # the longest other read of k decides how far in the swap may start
        reach = max(
            (len(w) for tj, mj, kj, w in all_reads if kj == k and (tj, mj) != (ti, mi)), default=0
        )
        if len(v) >= 2 and reach >= 1:
            candidates.append((ti, mi, v, min(reach, len(v) - 1)))
    assume(candidates)
    ti, mi, v, reach = data.draw(st.sampled_from(candidates))
    i = data.draw(st.integers(0, reach - 1))
    j = data.draw(st.integers(i + 1, len(v) - 1))
    swapped = list(v)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    txns = serial(with_read(executed, ti, mi, tuple(swapped)), procs)
    result = check(txns, "serializable")
    assert result["valid"] is False, result
    assert "incompatible-order" in result["anomaly_types"], (result, txns)


@SETTINGS
@given(
    programs(min_txns=2),
    processes(),
    st.sampled_from(("read-committed", "serializable", "strict-serializable")),
    st.data(),
)
def test_read_of_failed_append_is_g1a(
    program: Program, procs: list[int], model: str, data: st.DataObject
) -> None:
    """The writer of an element that a later ok read saw is marked failed: an aborted read."""
    executed = run_serially(program)
    writer = writers(executed)
    candidates = sorted(
        {writer[(k, x)] for ti, _, k, v in reads(executed) for x in v if writer[(k, x)] != ti}
    )
    assume(candidates)
    failed = data.draw(st.sampled_from(candidates))
    txns = [
        Txn(t.index, t.complete, t.process, "fail", t.start, t.end, unread(t.mops))
        if n == failed
        else t
        for n, t in enumerate(serial(executed, procs))
    ]
    result = check(txns, model)
    assert result["valid"] is False, result
    assert "G1a" in result["anomaly_types"], (result, txns)
