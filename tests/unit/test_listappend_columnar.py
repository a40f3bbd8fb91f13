"""The per-key analysis over arrays (checkers/listappend/columnar.py) against keys.py's: a key the
arrays keep has no case in keys.analyze nor in split_brain.analyze, and the same edges in the same
order; the crafted anomalies all go to keys.py; and a workload-like history's keys nearly all
stay with the arrays (else they would save nothing)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkers.listappend import columnar
from checkers.listappend import split_brain as split_brain_keys
from checkers.listappend.history import Txn
from checkers.listappend.keys import Access, analyze, by_key
from tests.unit.test_append_pipeline import perturbed
from tests.unit.test_listappend import CASES, concurrent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from listappend_scale import generate

from workloads.base import WorkloadOptions


def plain_int(v: Any) -> bool:
    return type(v) is int and abs(v) < 10**18


def rows_of(keys: dict[Any, list[Access]]) -> columnar.Rows:
    """The accesses as the arrays take them (the Spark worker makes the same from Arrow)."""
    cols: dict[str, list[Any]] = {c: [] for c in ("key", "txn", "type", "start", "end")}
    cols |= {c: [] for c in ("read", "plain", "element", "length")}
    values: list[int] = []
    for i, accesses in enumerate(keys.values()):
        for a in accesses:
            for _, f, v in a.ops:
                read = f == "r"
                code = columnar.TYPE_CODES.get(a.type, columnar.INFO)
                listed = read and isinstance(v, tuple) and code != columnar.FAIL
                plain = (all(map(plain_int, v)) if listed else True) if read else plain_int(v)
                cols["key"].append(i)
                cols["txn"].append(a.txn)
                cols["type"].append(code)
                cols["start"].append(a.start)
                cols["end"].append(columnar.END_UNKNOWN if a.end is None else a.end)
                cols["read"].append(read)
                cols["plain"].append(plain)
                cols["element"].append(0 if read or not plain else v)
                length = len(v) if listed and plain else columnar.NO_LIST
                cols["length"].append(length)
                if length > 0:
                    values.extend(v)
    arrays = {c: np.array(v, dtype=bool if c in ("read", "plain") else np.int64)
              for c, v in cols.items()}  # fmt: skip
    return columnar.Rows(**arrays, values=np.array(values, np.int64))


def agree(txns: list[Txn]) -> np.ndarray:
    """Every key the arrays keep is one keys.py finds nothing in, with the same edges; the
    flags per key."""
    keys = by_key(txns)
    result = columnar.analyse(rows_of(keys))
    for i, (k, accesses) in enumerate(keys.items()):
        if result.python[i]:
            continue
        expected = analyze(k, accesses)
        assert expected.cases == [], (k, expected.cases)
        assert split_brain_keys.analyze(k, accesses) == []
        mine = result.edge_key == i
        got = list(zip(*(x[mine].tolist() for x in (result.src, result.dst, result.kind)),
                       strict=True))  # fmt: skip
        assert got == [tuple(e) for e in expected.edges], k
    return result.python


@pytest.mark.parametrize("overlapping", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_crafted_anomaly_goes_to_keys_py_and_its_near_miss_agrees(
    name: str, overlapping: bool
) -> None:
    """Overlapping in time too: then no read began after an acknowledgement, so the test for a
    lost append, which catches many a case of a key, catches none."""
    anomalous, near_miss, _ = CASES[name]
    if overlapping:
        anomalous, near_miss = concurrent(*anomalous), concurrent(*near_miss)
    keys = by_key(anomalous)
    cased = [i for i, (k, accesses) in enumerate(keys.items()) if analyze(k, accesses).cases]
    flags = agree(anomalous)
    assert all(flags[i] for i in cased)
    agree(near_miss)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_generated_history_stays_with_the_arrays_and_agrees(seed: int) -> None:
    history = generate(1500, 8, WorkloadOptions(), seed, 0.02, 0.02, True)
    flags = agree(history)
    assert flags.mean() < 0.1, f"{flags.sum()} of {len(flags)} keys left to keys.py"
    agree(perturbed(history, seed))


ELEMENTS = st.integers(0, 6)


@st.composite
def histories(draw: st.DrawFn) -> list[Txn]:
    """A few transactions over two keys: appends of few elements (so some twice), reads mostly
    prefixes of one order (so clean keys are common), sometimes anything or no list; any type;
    times that overlap or not, an end unknown now and then; two nodes."""
    order = {k: draw(st.permutations(range(7))) for k in (0, 1)}
    txns = []
    t = 0
    for i in range(draw(st.integers(1, 9))):
        mops = []
        for _ in range(draw(st.integers(1, 4))):
            k = draw(st.sampled_from([0, 1]))
            if draw(st.booleans()):
                mops.append(("append", k, draw(ELEMENTS)))
            elif draw(st.integers(0, 5)) > 1:
                mops.append(("r", k, tuple(order[k][: draw(st.integers(0, 7))])))
            elif draw(st.booleans()):
                mops.append(("r", k, tuple(draw(st.lists(ELEMENTS, max_size=4)))))
            else:
                mops.append(("r", k, None))  # a read of no list
        typ = draw(st.sampled_from(["ok", "ok", "ok", "info", "fail"]))
        start = t + draw(st.integers(0, 3))
        end = None if draw(st.integers(0, 9)) == 0 else start + draw(st.integers(0, 5))
        t = start
        if typ == "info":
            mops = [(f, k, None if f == "r" else v) for f, k, v in mops]
        node = draw(st.sampled_from(["n1", "n2"]))
        txns.append(Txn(2 * i, 2 * i + 1, i % 3, typ, start, end, tuple(mops), node))
    return txns


@settings(max_examples=400, deadline=None)
@given(histories())
def test_any_small_history_agrees(txns: list[Txn]) -> None:
    agree(txns)
