"""`harness explore`'s choices, without a cluster: what a chain aims at, what the corpus keeps
between explorations, that each run is given the chains that would reach what no run reached,
and the loop's stops (a red run, the budget) and exit codes. A real exploration is run end to
end in tests/e2e/test_explore.py."""

from __future__ import annotations

import json
import random
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from checkers.moments import CatchUp, Rebuild, Takeover, TermWon
from clusters.registry import cluster_kind
from core.errors import BadInput
from harness.config import RunConfig
from harness.explore import (
    Corpus,
    Outcome,
    chains_per_run,
    choose,
    corpus_key,
    explore,
    sparse_chains,
    targets,
)
from nemesis import aimed_share
from nemesis.aimed import Aimed, Then, of_spec
from nemesis.schedule import timescale
from nemesis.seed001 import Seed001
from nemesis.seed003 import Seed003

MOMENTS = (TermWon, Takeover, CatchUp, Rebuild)
NODES = [f"n{i}" for i in range(1, 6)]


def chain(*moments: type | None) -> Aimed:
    first, *rest = moments
    then = tuple(Then(m, "kill", 0.0, 0.0) for m in rest)
    return Aimed(first, first.roles, "kill", "pause", 0.0, 3.0, 0.0, 2.0 if then else None, then)  # type: ignore[union-attr]


def test_a_chain_aims_at_its_first_step_and_each_pair_of_moments_it_names() -> None:
    assert targets(chain(TermWon)) == ["term-won:new-leader:pause"]
    assert targets(chain(TermWon, Takeover, None)) == [
        "term-won:new-leader:pause",
        "term-won>takeover",  # the step aimed at any moment names no pair
    ]


def test_the_corpus_keeps_what_runs_reached_and_what_was_tried_in_vain(tmp_path: Path) -> None:
    config = {"cluster": "safekeeper", "options": {}}
    corpus = Corpus.open(tmp_path, config)
    assert corpus.steps == {} and not corpus.path.exists()
    reached = {
        "chains": 2,  # the two given started; a third never did
        "steps": {"term-won:new-leader:pause": 1, "takeover:deposed:kill": 1},
        "pairs": {"term-won:new-leader:pause > takeover:deposed:kill": 1},
    }
    given = [chain(TermWon, Takeover), chain(CatchUp, Rebuild), chain(Rebuild, TermWon)]
    assert corpus.learn(reached, given) == 1
    assert corpus.learn(reached, []) == 0  # nothing new the second time
    assert corpus.moment_pairs() == {("term-won", "takeover")}
    # the catch-up chain reached nothing: it and its pair were tried in vain
    assert corpus.tried == {"catch-up:catching-up:pause": 1, "catch-up>rebuild": 1}
    corpus.runs.append({"run": "r1"})
    corpus.save()
    again = Corpus.open(tmp_path, config)
    assert (again.steps, again.pairs, again.tried, again.runs) == (
        corpus.steps,
        corpus.pairs,
        corpus.tried,
        corpus.runs,
    )
    assert Corpus.open(tmp_path, config | {"cluster": "patroni"}).path != corpus.path


def test_each_run_is_given_the_chains_that_would_reach_what_no_run_reached(
    tmp_path: Path,
) -> None:
    """With every pair from term-won reached, the chains chosen start elsewhere or aim at
    pairs not yet reached; the chains of one run aim at different pairs."""
    corpus = Corpus.open(tmp_path, {"cluster": "safekeeper"})
    for m in MOMENTS:
        corpus.pairs[f"term-won:voters:kill > {m.name}:leader:kill"] = 3
    chosen = choose(corpus, MOMENTS, NODES, 4, random.Random(1))
    pairs = [t for c in chosen for t in targets(c) if ">" in t]
    assert len(pairs) >= 4 and len(set(pairs)) == len(pairs), pairs
    reached = {f"term-won>{m.name}" for m in MOMENTS}
    assert not [p for p in pairs if p in reached], pairs
    # what is chosen depends on the seed alone, given the corpus
    again = choose(corpus, MOMENTS, NODES, 4, random.Random(1))
    assert [c.spec() for c in again] == [c.spec() for c in chosen]
    # and a chain round-trips through its spec, as a run's config.json keeps it
    for c in chosen:
        assert of_spec(json.loads(json.dumps(c.spec())), MOMENTS).spec() == c.spec()


def test_the_seeds_histories_are_chains_explore_can_give() -> None:
    """A seed's history aims at its phases' pairs of moments; with every drawn pair reached,
    the histories' pairs are what is new, and they are given; a history round-trips through
    its spec, and a kind without terms won cannot be given one."""
    history = Seed003([4, 0, 1, 2, 3])
    assert targets(history) == [
        "serving:leader:partition-tail",
        "serving>term-won",
        "term-won>recorded",
        "recorded>stood-down",
    ]
    assert targets(Seed001([0, 1, 2, 3, 4], "fresh"))[:2] == [
        "serving:leader:kill",
        "serving>term-won",
    ]
    corpus = Corpus.open(Path("/nonexistent"), {"cluster": "safekeeper"})
    for a in MOMENTS:
        for b in MOMENTS:
            corpus.pairs[f"{a.name}:x:kill > {b.name}:y:kill"] = 1
    chosen = choose(corpus, MOMENTS, NODES, 4, random.Random(2))
    assert any(isinstance(c, Seed003 | Seed001) for c in chosen), [c.spec() for c in chosen]
    for spec in (history.spec(), Seed001([1, 0, 2, 3, 4], "fresh").spec()):
        assert of_spec(json.loads(json.dumps(spec)), MOMENTS).spec() == spec
    with pytest.raises(BadInput, match="no term-won moment"):
        of_spec(history.spec(), (Takeover,))
    with pytest.raises(BadInput, match=r"needs 5 nodes .*this cluster has 4"):
        of_spec(history.spec(), MOMENTS, node_count=4)
    with pytest.raises(BadInput, match="the histories are seed003, seed001"):
        of_spec({"history": "seed002", "order": [0]}, MOMENTS)
    with pytest.raises(BadInput, match="no tail 'stale'"):
        of_spec({"history": "seed001", "order": [0], "tail": "stale"}, MOMENTS)


def test_a_run_meets_about_as_many_chains_as_its_faults() -> None:
    assert chains_per_run(60, 10) == 4
    assert chains_per_run(20, 40) == 2
    assert chains_per_run(120, 10, 7 / 17) == 3  # `all`'s aimed share: 7 of its 17 entries


def test_a_mixed_schedule_that_meets_few_chains_is_said_to() -> None:
    assert sparse_chains("safekeeper", 120, 10, 7 / 17) is None  # 2.5 chains a run
    assert sparse_chains("patroni", 300, 40, 1.0) is None  # --nemesis aimed: every fault
    warning = sparse_chains("patroni", 300, 40, 3 / 19)
    assert warning and "meets 0.6 chains" in warning and "--nemesis aimed" in warning


def test_all_on_patroni_meets_less_than_a_chain_in_a_run_of_300_s() -> None:
    """What a user who explores Patroni with `--nemesis all --time 300` is told: Patroni's
    40 s timescale leaves room for few faults, and `all` draws aimed for few of them."""
    kind = cluster_kind("patroni")
    options = {"members": 3, "patroni_sync": "quorum", "ttl": 30}
    interval = timescale(kind.failover_s(options), None)[0]
    share = aimed_share(["all"], kind.nodes_needed(options), False, True, kind.moments, kind)
    assert 0 < share < 0.5
    assert sparse_chains("patroni", 300, interval, share) is not None
    assert (
        sparse_chains(
            "patroni",
            300,
            interval,
            aimed_share(["aimed"], kind.nodes_needed(options), False, True, kind.moments, kind),
        )
        is None
    )


def test_an_exploration_of_all_keeps_a_corpus_apart_from_one_of_aimed() -> None:
    aimed, every = RunConfig(nemesis=["aimed"]), RunConfig(nemesis=["all"])
    assert corpus_key(every) != corpus_key(aimed) and "nemesis" not in corpus_key(aimed)


def run_with(codes: list[int], pairs: list[dict[str, int]]) -> Any:
    """A run_one that returns these verdicts and reached pairs in turn, recording its configs."""
    given: list[RunConfig] = []

    def run_one(cfg: RunConfig) -> Outcome:
        n = len(given)
        given.append(cfg)
        return Outcome(Path(f"r{n}"), codes[n], {"steps": {}, "pairs": pairs[n]})

    run_one.given = given  # type: ignore[attr-defined]
    return run_one


def test_the_exploration_stops_at_the_first_red_run_and_names_its_replay(tmp_path: Path) -> None:
    base = RunConfig(store=tmp_path, time_limit=20)
    run_one = run_with([0, 1, 0], [{"a > b": 1}, {}, {}])
    out = StringIO()
    code = explore(base, 60, MOMENTS, NODES, 3, run_one, Console(file=out, width=400))
    assert code == 1 and len(run_one.given) == 2
    assert "red run: r1" in out.getvalue() and "--chains r1/config.json" in out.getvalue()
    assert [c.seed for c in run_one.given] == [0, 1]
    assert all(c.nemesis == ["aimed"] or c.chains for c in run_one.given)
    corpus = json.loads(next((tmp_path / "explore").iterdir()).read_text())
    assert [r["verdict"] for r in corpus["runs"]] == ["valid", "invalid"]
    assert corpus["runs"][0]["new_pairs"] == 1
    # resumed: the next run takes the next seed, and the corpus its pairs
    resumed = run_with([0], [{}])
    explore(base, 0.0001, MOMENTS, NODES, 3, resumed, Console(file=StringIO()))
    assert [c.seed for c in resumed.given] == [2]
    assert corpus_key(base) == corpus_key(RunConfig(store=tmp_path / "x", seed=9))


def test_a_budget_spent_with_every_run_valid_is_0_and_an_undecided_run_2(tmp_path: Path) -> None:
    valid = run_with([0] * 3, [{}] * 3)
    assert explore(RunConfig(store=tmp_path / "a"), 0.0001, MOMENTS, NODES, 3, valid,
                   Console(file=StringIO())) == 0  # fmt: skip
    undecided = run_with([2], [{}])
    assert explore(RunConfig(store=tmp_path / "b"), 0.0001, MOMENTS, NODES, 3, undecided,
                   Console(file=StringIO())) == 2  # fmt: skip
