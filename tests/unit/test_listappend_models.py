"""The model/anomaly tables: exact prohibited sets per model and exact boundaries per anomaly.

Expected sets are written out by hand here (from Elle's consistency_model.clj and the papers it
cites), never computed with the module, so a wrong table entry or a wrong closure direction
shows up as a set difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from checkers.listappend import models


def rt(*names: str) -> set[str]:
    """The -realtime variants of `names`."""
    return {n + "-realtime" for n in names}


def proc(*names: str) -> set[str]:
    """The -process variants of `names`."""
    return {n + "-process" for n in names}


RU = {"G0", "duplicate-elements", "cyclic-versions", "PL-1-cycle-exists"}
RC = RU | {
    "G1",
    "G1a",
    "G1b",
    "G1c",
    "dirty-update",
    "incompatible-order",
    "future-read",
    "PL-2-cycle-exists",
}
RR = RC | {
    "G2-item",
    "G-nonadjacent-item",
    "G-single-item",
    "lost-update",
    "G-cursor",
    "PL-2.99-cycle-exists",
}
SI = RC | {
    "internal",
    "lost-update",
    "G-single-item",
    "G-single",
    "G-nonadjacent-item",
    "G-nonadjacent",
    "G-SI",
    "G-SIb",
    "G-MSR",
    "G-monotonic",
    "G-cursor",
    "PL-SI-cycle-exists",
}
SER = SI | RR | {"G2", "write-skew", "G-update", "predicate-read-miss", "PL-3-cycle-exists"}
SS_RU = RU | {"G0-process", "strong-session-PL-1-cycle-exists"}
SS_RC = RC | SS_RU | {"G1c-process", "strong-session-PL-2-cycle-exists"}
SS_SI_ADDS = proc(
    "G0", "G1c", "G1", "G-single-item", "G-single", "G-nonadjacent-item", "G-nonadjacent"
) | {
    "strong-session-PL-1-cycle-exists",
    "strong-session-PL-2-cycle-exists",
    "strong-session-snapshot-isolation-cycle-exists",
}
SS_SI = SI | SS_SI_ADDS
SS_SER = SER | SS_SI_ADDS | proc("G2-item", "G2") | {"strong-session-serializable-cycle-exists"}
S_RU = SS_RU | {"G0-realtime", "strong-PL-1-cycle-exists"}
S_RC = SS_RC | S_RU | {"G1c-realtime", "strong-PL-2-cycle-exists"}
S_SI = (
    SS_SI
    | rt("G0", "G1c", "G1", "G-single-item", "G-single", "G-nonadjacent-item", "G-nonadjacent")
    | {
        "strong-PL-1-cycle-exists",
        "strong-PL-2-cycle-exists",
        "strong-snapshot-isolation-cycle-exists",
    }
)
STRICT = SS_SER | S_SI | S_RC | rt("G2-item", "G2") | {"PL-SS-cycle-exists"}

EXPECTED_PROHIBITED = {
    "read-uncommitted": RU,
    "read-committed": RC,
    "repeatable-read": RR,
    "snapshot-isolation": SI,
    "serializable": SER,
    "strict-serializable": STRICT,
    "strong-session-read-uncommitted": SS_RU,
    "strong-session-read-committed": SS_RC,
    "strong-session-snapshot-isolation": SS_SI,
    "strong-session-serializable": SS_SER,
    "strong-read-uncommitted": S_RU,
    "strong-read-committed": S_RC,
    "strong-snapshot-isolation": S_SI,
}


def test_models_offered() -> None:
    assert tuple(EXPECTED_PROHIBITED) == models.MODELS


@pytest.mark.parametrize("model", sorted(EXPECTED_PROHIBITED))
def test_prohibited_exact(model: str) -> None:
    got = models.prohibited([model])
    expected = EXPECTED_PROHIBITED[model]
    assert got == expected, (sorted(got - expected), sorted(expected - got))
    assert isinstance(got, frozenset)


def test_prohibited_spot_checks() -> None:
    rc = models.prohibited(["read-committed"])
    assert "internal" not in rc
    assert "G2-item" not in rc
    ser = models.prohibited(["serializable"])
    assert {"G2-item", "G-single-item"} <= ser
    assert not [a for a in ser if a.endswith(("-process", "-realtime"))]
    assert "G2-item" not in models.prohibited(["snapshot-isolation"])
    assert "G2" not in models.prohibited(["snapshot-isolation"])
    assert "G2-item-realtime" in models.prohibited(["strict-serializable"])
    assert "G2-item-realtime" not in models.prohibited(["strong-snapshot-isolation"])
    cycle_exists = {a for a in STRICT if a.endswith("-cycle-exists")}
    assert len(cycle_exists) == 13
    assert cycle_exists <= models.prohibited(["strict-serializable"])


def test_prohibited_unions_models_and_accepts_aliases() -> None:
    assert models.prohibited(["snapshot-isolation", "repeatable-read"]) == SI | RR
    assert models.prohibited(["PL-3"]) == SER
    assert models.prohibited(["strong-serializable"]) == STRICT
    assert models.prohibited(["strong-session-PL-2"]) == SS_RC
    assert models.prohibited([]) == frozenset()
    # Models outside the transactional hierarchy forbid nothing we detect.
    assert models.prohibited(["linearizable"]) == frozenset()
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        models.prohibited(["serializable", "nope"])


@pytest.mark.parametrize(
    ("alias", "friendly"),
    [
        ("serializable", "serializable"),
        ("PL-3", "serializable"),
        ("conflict-serializable", "serializable"),
        ("strict-serializable", "strict-serializable"),
        ("strong-serializable", "strict-serializable"),
        ("PL-SS", "strict-serializable"),
        ("PL-1", "read-uncommitted"),
        ("PL-2", "read-committed"),
        ("PL-2.99", "repeatable-read"),
        ("PL-SI", "snapshot-isolation"),
        ("PL-CS", "cursor-stability"),
        ("PL-2+", "consistent-view"),
        ("PL-FCV", "forward-consistent-view"),
        ("PL-MSR", "monotonic-snapshot-read"),
        ("PL-2L", "monotonic-view"),
        ("PL-3U", "update-serializable"),
        ("strong-session-PL-1", "strong-session-read-uncommitted"),
        ("strong-session-PL-2", "strong-session-read-committed"),
        ("strong-PL-1", "strong-read-uncommitted"),
        ("strong-PL-2", "strong-read-committed"),
        ("linearizable", "linearizable"),
        ("1SR", "1SR"),
        ("PRAM", "PRAM"),
        ("read-atomic", "read-atomic"),
    ],
)
def test_check_model_names(alias: str, friendly: str) -> None:
    assert models.check_model(alias) == friendly


def test_check_model_accepts_every_offered_model() -> None:
    for m in models.MODELS:
        assert models.check_model(m) == m


@pytest.mark.parametrize("bad", ["nope", "", "Serializable", "PL-4", "G2"])
def test_check_model_rejects(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        models.check_model(bad)
    message = str(info.value)
    assert message.startswith(f"unknown model '{bad}': choose from ")
    for m in models.MODELS:
        assert m in message


def test_implied_forward_closure() -> None:
    assert models.implied(["G0"]) == {
        "G0",
        "G1c",
        "G1",
        "G0-process",
        "G1c-process",
        "G1-process",
        "G0-realtime",
        "G1c-realtime",
        "G1-realtime",
    }
    assert models.implied(["G-single-item-process"]) == proc(
        "G-single-item", "G-single", "G-nonadjacent-item", "G-nonadjacent", "G2-item", "G2"
    ) | rt("G-single-item", "G-single", "G-nonadjacent-item", "G-nonadjacent", "G2-item", "G2")
    assert models.implied(["G-single"]) == {"G-single", "G-nonadjacent", "G-SIb", "G2"} | proc(
        "G-single", "G-nonadjacent", "G2"
    ) | rt("G-single", "G-nonadjacent", "G2")
    assert models.implied(["lost-update"]) == {
        "lost-update",
        "write-skew",
        "G2-item",
        "G2",
    } | proc("G2-item", "G2") | rt("G2-item", "G2")
    assert models.implied(["incompatible-order"]) == {
        "incompatible-order",
        "G1a",
        "G1",
        "G1-process",
        "G1-realtime",
    }
    assert models.implied(["G2-realtime"]) == {"G2-realtime"}
    assert models.implied(["empty-transaction-graph"]) == {"empty-transaction-graph"}
    assert models.implied([]) == frozenset()


def assert_acyclic(graph: Mapping[str, Iterable[str]]) -> None:
    """No entry implies itself, however far the implications go."""
    for start in graph:
        reachable: set[str] = set()
        todo = list(graph[start])
        while todo:
            a = todo.pop()
            assert a != start, f"{start} implies itself"
            if a not in reachable:
                reachable.add(a)
                todo.extend(graph.get(a, ()))


def test_anomaly_graph_is_acyclic() -> None:
    assert_acyclic(models.ANOMALY_IMPLIES)


def test_model_graph_is_acyclic_and_friendly() -> None:
    graph = models.MODEL_IMPLIES
    assert_acyclic(graph)
    names = set(graph) | {m for ms in graph.values() for m in ms} | set(models.PROSCRIBES)
    assert not names & set(models.ALIASES), "tables must use friendly names only"


BOUNDARIES = {
    ("read-uncommitted",): ["G0", "duplicate-elements", "cyclic-versions"],
    ("read-committed",): [
        "G1a",
        "G1b",
        "G1c",
        "future-read",
        "dirty-update",
        "incompatible-order",
    ],
    ("read-atomic",): ["internal"],
    ("cursor-stability", "update-atomic"): ["lost-update"],
    ("consistent-view", "repeatable-read"): ["G-single-item"],
    ("consistent-view",): ["G-single"],
    ("repeatable-read", "snapshot-isolation"): ["G-nonadjacent-item"],
    ("snapshot-isolation",): ["G-nonadjacent"],
    ("repeatable-read",): ["G2-item"],
    ("serializable",): ["G2"],
    ("strong-session-read-uncommitted",): ["G0-process"],
    ("strong-session-read-committed",): ["G1c-process"],
    ("strong-session-snapshot-isolation",): [
        "G-single-item-process",
        "G-single-process",
        "G-nonadjacent-item-process",
        "G-nonadjacent-process",
    ],
    ("strong-session-serializable",): ["G2-item-process", "G2-process"],
    ("strong-read-uncommitted",): ["G0-realtime"],
    ("strong-read-committed",): ["G1c-realtime"],
    ("strong-snapshot-isolation",): [
        "G-single-item-realtime",
        "G-single-realtime",
        "G-nonadjacent-item-realtime",
        "G-nonadjacent-realtime",
    ],
    ("strict-serializable",): ["G2-item-realtime", "G2-realtime"],
    (): ["empty-transaction-graph", "cycle-search-timeout"],
}


@pytest.mark.parametrize(
    ("anomaly", "expected_not"),
    [(a, list(ms)) for ms, anomalies in BOUNDARIES.items() for a in anomalies],
)
def test_boundary_not(anomaly: str, expected_not: list[str]) -> None:
    not_, also_not = models.boundary([anomaly])
    assert not_ == expected_not
    assert also_not == sorted(also_not)
    assert not set(not_) & set(also_not)
    if not expected_not:
        assert also_not == []


def test_boundary_also_not_exact() -> None:
    assert models.boundary(["G-single-item-realtime"]) == (
        ["strong-snapshot-isolation"],
        ["strict-serializable"],
    )
    assert models.boundary(["G2"]) == (
        ["serializable"],
        ["strict-serializable", "strong-session-serializable"],
    )
    assert models.boundary(["G1c-realtime"]) == (
        ["strong-read-committed"],
        ["strict-serializable", "strong-snapshot-isolation"],
    )
    assert models.boundary(["G2-item"]) == (
        ["repeatable-read"],
        ["serializable", "strict-serializable", "strong-session-serializable"],
    )
    assert models.boundary(["G0-process"]) == (
        ["strong-session-read-uncommitted"],
        [
            "strict-serializable",
            "strong-read-committed",
            "strong-read-uncommitted",
            "strong-session-read-committed",
            "strong-session-serializable",
            "strong-session-snapshot-isolation",
            "strong-snapshot-isolation",
        ],
    )


def test_boundary_g0_rules_out_every_transactional_model_but_not_single_object_ones() -> None:
    not_, also_not = models.boundary(["G0"])
    assert not_ == ["read-uncommitted"]
    impossible = set(also_not)
    assert set(models.MODELS) - {"read-uncommitted"} <= impossible
    assert {"read-atomic", "cursor-stability", "prefix", "update-serializable"} <= impossible
    single_object = {"linearizable", "sequential", "causal", "PRAM", "monotonic-reads"}
    assert not single_object & impossible
    assert not {"1SR", "session-serializable", "view-serializable"} & impossible


def test_boundary_of_several_anomalies_keeps_only_the_weakest() -> None:
    assert models.boundary(["G0", "G2"])[0] == ["read-uncommitted"]
    # consistent-view implies cursor-stability, so it is only "also not".
    assert models.boundary(["lost-update", "G-single"]) == (
        ["cursor-stability", "update-atomic"],
        models.boundary(["lost-update"])[1],
    )
    assert models.boundary(["internal", "G2-item"])[0] == ["read-atomic", "repeatable-read"]
    assert models.boundary([]) == ([], [])


def test_boundary_prints_friendly_names() -> None:
    not_, also_not = models.boundary(["G0"])
    assert not (set(not_) | set(also_not)) & set(models.ALIASES)
    assert "strict-serializable" in also_not
    assert "strong-serializable" not in also_not


def test_prohibited_and_boundary_agree() -> None:
    """A model forbids an anomaly exactly when finding that anomaly rules the model out."""
    anomalies = set(models.ANOMALY_IMPLIES) | {
        a for targets in models.PROSCRIBES.values() for a in targets
    }
    for model in models.MODELS:
        forbidden = models.prohibited([model])
        for anomaly in anomalies:
            not_, also_not = models.boundary([anomaly])
            assert (anomaly in forbidden) == (model in not_ + also_not), (model, anomaly)
