"""Generators: same seed, same operations; values unique where the model needs them to be."""

import itertools
import threading
import time

from harness.generator import Generator, Pacer
from workloads import build
from workloads.base import WorkloadOptions


def ops(seed: int, names: list[str], n: int = 300) -> list[tuple[str, str, object]]:
    gen = Generator(build(names, WorkloadOptions()), seed)
    return [(op.workload, op.f, op.value) for op in (gen.next() for _ in range(n))]


def test_same_seed_same_sequence() -> None:
    assert ops(7, ["bank", "append", "set"]) == ops(7, ["bank", "append", "set"])


def test_different_seed_different_sequence() -> None:
    assert ops(7, ["bank", "append"]) != ops(8, ["bank", "append"])


def test_mixed_workloads_all_get_operations() -> None:
    assert {w for w, _, _ in ops(1, ["bank", "append", "set"])} == {"bank", "append", "set"}


def test_appended_values_are_unique_per_key_and_keys_rotate() -> None:
    seen: set[tuple[int, int]] = set()
    keys = set()
    for _, _, txn in ops(3, ["append"], 2000):
        assert 1 <= len(txn) <= 4
        for kind, key, value in txn:
            keys.add(key)
            if kind == "append":
                assert (key, value) not in seen
                seen.add((key, value))
            else:
                assert value is None
    assert len(keys) > WorkloadOptions().key_count  # retired keys were replaced


def test_set_elements_are_unique() -> None:
    adds = [v for _, f, v in ops(5, ["set"], 1000) if f == "add"]
    assert len(adds) == len(set(adds)) > 900


def test_transfers_stay_within_accounts_and_amounts() -> None:
    opts = WorkloadOptions()
    for _, f, v in ops(9, ["bank"], 500):
        if f == "transfer":
            assert v["from"] != v["to"]
            assert {v["from"], v["to"]} <= set(range(opts.accounts))
            assert 1 <= v["amount"] <= opts.max_transfer
        else:
            assert f == "read" and v is None


def test_pacer_spaces_operations_by_the_rate() -> None:
    pacer, stop = Pacer(rate=200.0), threading.Event()
    start = time.monotonic()
    for _ in itertools.repeat(None, 41):
        assert pacer.wait(stop)
    assert time.monotonic() - start >= 40 / 200.0 * 0.9


def test_pacer_stops_when_asked() -> None:
    stop = threading.Event()
    stop.set()
    assert not Pacer(rate=1.0).wait(stop)
    assert not Pacer(rate=0).wait(stop)
