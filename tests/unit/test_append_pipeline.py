"""The append workload's checkers in the pipeline (the per-key pass as a Spark job, the judgement
on the driver) reach the same verdicts as the in-process checker on the same history: the crafted
anomalies, split-brain, a generated workload-like history and perturbations of it."""

from __future__ import annotations

import dataclasses
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame

from checkers import append as plain_append
from checkers import split_brain as plain_split_brain
from checkers.listappend import check
from checkers.listappend import split_brain as split_brain_keys
from checkers.listappend.history import Txn, write_history
from checkers.reader import read_history
from checkers.spark import append as append_checker
from checkers.spark import split_brain as split_brain_checker
from checkers.spark.append_keys import _analyse, _keys, key_pass
from checkers.spark.append_micro_ops import explode
from core.contract import Contract
from core.errors import BadInput
from core.history import Op
from tests.unit.test_listappend import CASES, A, R, txn
from tests.unit.test_split_brain import txn as node_txn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from listappend_scale import generate

from workloads.base import WorkloadOptions

COMPARED = ("valid", "anomaly_types", "anomaly_counts", "not", "also_not", "edge_count")


@pytest.fixture
def via_spark(tmp_path: Path, ops_of: Callable[[Path], DataFrame]) -> Callable[..., DataFrame]:
    def load(txns: list[Txn]) -> DataFrame:
        path = tmp_path / "history.jsonl"
        write_history(txns, path)
        return ops_of(path)

    return load


def plain_ops(history: list[Txn]) -> list[Op]:
    """The history's operations as the plain checkers take them, through a history file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "history.jsonl"
        write_history(history, path)
        return read_history(path)


def same(
    history: list[Txn], ops: DataFrame, model: str, contract: Contract = Contract.DURABLE
) -> None:
    """The verdict through Spark is the plain checker's, whole, and the in-process one's."""
    pure = check(history, model, contract=contract)
    piped = append_checker.check(ops, model, contract=contract)
    assert plain_append.check(plain_ops(history), model, contract=contract) == piped
    assert {k: piped[k] for k in COMPARED} == {k: pure[k] for k in COMPARED}
    assert [a["explanation"] for a in piped["anomalies"]] == [
        a["explanation"] for a in pure["anomalies"]
    ]


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_crafted_anomaly_gets_the_same_verdict(name: str, via_spark: Any) -> None:
    history, _, model = CASES[name]
    same(history, via_spark(history), model)


def test_a_resurrected_rollback_is_found_through_spark(via_spark: Any) -> None:
    rolled = dataclasses.replace(
        txn(1, A("x", 1), type="fail"), error="40001: could not serialize access"
    )
    history = [rolled, txn(2, R("x", [1]))]
    ops = via_spark(history)
    same(history, ops, "read-uncommitted", "confirm-rollback")
    result = append_checker.check(ops, "read-uncommitted", contract=Contract.CONFIRM_ROLLBACK)
    assert result["valid"] is False and "resurrected-rollback" in result["anomaly_types"]


def test_a_write_rolled_back_for_want_of_a_quorum_that_reappears(via_spark: Any) -> None:
    """The confirm/rollback mode's error: flagged in that mode; in the safekeeper mode the read
    of a failed write is only the aborted read (G1a) that serializable rules out."""
    rolled = dataclasses.replace(
        txn(1, A("x", 1), type="fail"),
        error="rolled back: the quorum was not collected in time",
    )
    history = [rolled, txn(2, A("y", 1)), txn(3, R("x", [1]), R("y", [1]))]
    ops = via_spark(history)
    for contract in Contract:
        same(history, ops, "serializable", contract)
    flagged = append_checker.check(ops, "serializable", contract=Contract.CONFIRM_ROLLBACK)
    assert flagged["valid"] is False
    assert flagged["anomaly_types"] == ["G1a", "resurrected-rollback"]
    (case,) = [a for a in flagged["anomalies"] if a["type"] == "resurrected-rollback"]
    assert [op["invoke_index"] for op in case["ops"]] == [2, 6]
    assert "was told it was rolled back (rolled back: the quorum" in case["explanation"]
    allowed = append_checker.check(ops, "serializable", contract=Contract.DURABLE)
    assert (allowed["valid"], allowed["anomaly_types"]) == (False, ["G1a"])


def test_split_brain_is_found_through_spark(via_spark: Any) -> None:
    history = [
        node_txn(1, "n1", A("x", 1)),
        node_txn(2, "n1", A("x", 2)),
        node_txn(3, "n2", A("x", 3)),
        node_txn(4, "n1", R("x", [1, 2])),
        node_txn(5, "n2", R("x", [1, 3])),
    ]
    result = split_brain_checker.check(via_spark(history))
    assert plain_split_brain.check(plain_ops(history)) == result
    pure = split_brain_keys.check(history, [])
    assert result["anomaly_types"] == pure["anomaly_types"] == ["split-brain"]
    assert [a["nodes"] for a in result["anomalies"]] == [a["nodes"] for a in pure["anomalies"]]


def perturbed(history: list[Txn], seed: int) -> list[Txn]:
    """The history with one read changed: an element dropped, or two swapped."""
    rng = random.Random(seed)
    reads = [
        (i, j)
        for i, t in enumerate(history)
        if t.type == "ok"
        for j, (f, _, v) in enumerate(t.mops)
        if f == "r" and v and len(v) > 1
    ]
    i, j = rng.choice(reads)
    f, k, v = history[i].mops[j]
    values = list(v)
    if seed % 2:
        del values[rng.randrange(len(values))]
    else:
        a = rng.randrange(len(values) - 1)
        values[a], values[a + 1] = values[a + 1], values[a]
    mops = (*history[i].mops[:j], (f, k, tuple(values)), *history[i].mops[j + 1 :])
    return [*history[:i], dataclasses.replace(history[i], mops=mops), *history[i + 1 :]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_histories_and_perturbations_agree(seed: int, via_spark: Any) -> None:
    history = generate(1500, 8, WorkloadOptions(), seed, 0.02, 0.02, True)
    model = "strict-serializable" if seed == 3 else "serializable"
    same(history, via_spark(history), model)
    broken = perturbed(history, seed)
    assert check(broken, model)["valid"] is False
    same(broken, via_spark(broken), model)


def test_a_key_split_across_arrow_batches_is_analysed_whole(via_spark: Any) -> None:
    """The worker reads a partition's rows a batch at a time and a key's rows may straddle
    batches: whatever the batch size (and with empty batches among them), every key's edges and
    cases (a perturbed read makes some) are those of the partition read at once."""
    history = perturbed(generate(400, 6, WorkloadOptions(), 7, 0.05, 0.02, True), 1)
    rows = key_pass(via_spark(history)).rows.sort("key", "txn", "pos").toArrow()

    def analysed(batches: list[pa.RecordBatch]) -> dict[str, list[Any]]:
        return pa.Table.from_batches(list(_analyse(iter(batches)))).to_pydict()

    whole = analysed(rows.to_batches(max_chunksize=rows.num_rows))
    assert len(set(whole["key"]) - {None}) > 10 and any(whole["case"])
    empty = rows.to_batches()[0].slice(0, 0)
    for size in (1, 7, 64):
        batches = rows.to_batches(max_chunksize=size)
        assert analysed([empty, *batches[:3], empty, *batches[3:]]) == whole


def test_a_txn_of_a_process_that_is_no_number_is_bad_input(
    tmp_path: Path, ops_of: Callable[[Path], DataFrame]
) -> None:
    """The transactions' metadata is built beside the pass: its complaint still reaches the user."""
    path = tmp_path / "history.jsonl"
    path.write_text(
        '{"index":0,"time":1,"process":"w1","type":"invoke","f":"txn","value":[["append",1,1]]}\n'
        '{"index":1,"time":2,"process":"w1","type":"ok","f":"txn","value":[["append",1,1]]}\n'
    )
    with pytest.raises(BadInput, match="a txn operation's process is not a number"):
        append_checker.check(ops_of(path))
    with pytest.raises(BadInput, match="a txn operation's process is not a number"):
        plain_append.check(read_history(path))


def test_the_worker_reads_each_argument_as_the_history_wrote_it(
    tmp_path: Path, ops_of: Callable[[Path], DataFrame]
) -> None:
    """A read's list becomes a tuple and anything else it holds nothing; an appended list is
    hashable all the way down; a number beyond a double comes as Spark's text for it. Each
    access keeps its transaction's outcome, node and error, absent ones as None."""
    value = (
        '[["append","k",[1,[2]]],["r","k",5],["r","k",null],["r","k",[[1],"a"]],'
        '["append",2,"s"],["append",2,1e400],["r",2,[]],["append",3,null]]'
    )
    path = tmp_path / "history.jsonl"
    path.write_text(
        f'{{"index":0,"time":1,"process":0,"type":"invoke","f":"txn","value":{value}}}\n'
        f'{{"index":1,"time":2,"process":0,"type":"ok","f":"txn","value":{value}}}\n'
        '{"index":2,"time":3,"process":1,"type":"invoke","f":"txn","value":[["append",3,9]]}\n'
        '{"index":3,"time":4,"process":1,"type":"fail","f":"txn","value":[["append",3,9]],'
        '"node":"n1","error":"rolled back"}\n'
    )
    rows = explode(ops_of(path)).sort("key", "txn", "pos").toArrow()
    accesses = dict(_keys(rows.to_batches()))
    assert [(a.txn, a.type, a.start, a.end, a.node, a.error) for a in accesses[3]] == [
        (0, "ok", 1, 2, None, None),
        (2, "fail", 3, 4, "n1", "rolled back"),
    ]
    ops = {k: [op for a in accesses for op in a.ops] for k, accesses in accesses.items()}
    assert ops == {
        "k": [(0, "append", (1, (2,))), (1, "r", None), (2, "r", None), (3, "r", ((1,), "a"))],
        2: [(4, "append", "s"), (5, "append", "Infinity"), (6, "r", ())],
        3: [(7, "append", None), (0, "append", 9)],
    }
