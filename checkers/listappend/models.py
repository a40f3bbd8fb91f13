"""Consistency models and anomalies as data, after Elle (Kingsbury & Alvaro, VLDB 2021).

The list-append checker finds anomalies (G0, G-single-item-process, lost-update, ...); users ask
about consistency models (serializable, snapshot-isolation, ...). This module is the bridge, and
it holds no logic beyond three small tables and graph closures over them, so that the tables can
be read, reviewed and corrected against the literature on their own:

- MODEL_IMPLIES: model A -> B when every history satisfying A also satisfies B.
- ANOMALY_IMPLIES: anomaly A -> B when a history exhibiting A also exhibits B.
- PROSCRIBES: the anomalies each model forbids *directly*, i.e. over what the weaker models it
  implies already forbid.

From these, `prohibited` answers "which anomalies must a checker for these models look for?"
(closing downwards over models and backwards over anomalies: forbidding G1 forbids G1a, since
G1a is a G1), and `boundary` answers "which models does this history rule out?" (closing
forwards over anomalies and upwards over models), reported as Elle's :not / :also-not.

Names: models are printed by their friendly names. PL-SS is printed as "strict-serializable"
(Elle prints "strong-serializable"; our users and our issue say strict) and both spellings,
plus Adya's PL-* names, are accepted as input. Elle spells Adya's SI anomaly "GSIb" in its
implication graph but "G-SIb" where forward-consistent-view proscribes it, so there the edge
G-single -> GSIb leads nowhere; here it is "G-SIb" in both places, so the edge means what it
says (the results happen to agree, as consistent-view forbids G-single itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

MODELS: tuple[str, ...] = (
    "read-uncommitted",
    "read-committed",
    "repeatable-read",
    "snapshot-isolation",
    "serializable",
    "strict-serializable",
    "strong-session-read-uncommitted",
    "strong-session-read-committed",
    "strong-session-snapshot-isolation",
    "strong-session-serializable",
    "strong-read-uncommitted",
    "strong-read-committed",
    "strong-snapshot-isolation",
)
"""The models --model offers: the ones our list-append checker can meaningfully judge."""

ALIASES: Mapping[str, str] = {
    # Adya's names (and Elle's canonical ones) for the friendly models.
    "PL-1": "read-uncommitted",
    "PL-2": "read-committed",
    "PL-2.99": "repeatable-read",
    "PL-3": "serializable",
    "conflict-serializable": "serializable",  # Elle, after Bernstein: serializable means this
    "PL-SI": "snapshot-isolation",
    "PL-SS": "strict-serializable",
    "strong-serializable": "strict-serializable",  # Elle's output name for PL-SS
    "PL-CS": "cursor-stability",
    "PL-2+": "consistent-view",
    "PL-FCV": "forward-consistent-view",
    "PL-MSR": "monotonic-snapshot-read",
    "PL-2L": "monotonic-view",
    "PL-3U": "update-serializable",
    "strong-session-PL-1": "strong-session-read-uncommitted",
    "strong-session-PL-2": "strong-session-read-committed",
    "strong-PL-1": "strong-read-uncommitted",
    "strong-PL-2": "strong-read-committed",
}
"""Other accepted names, each mapped to the friendly name we print."""

MODEL_IMPLIES: Mapping[str, tuple[str, ...]] = {
    # Transactional models (Adya, Bailis, Cerone, Daudjee, Zuikeviciute; see jepsen.io).
    "strict-serializable": (
        "serializable",
        "snapshot-isolation",
        "linearizable",
        "strong-snapshot-isolation",
        "strong-session-serializable",
        "session-serializable",
    ),
    "session-serializable": ("1SR",),
    "strong-session-serializable": ("serializable", "strong-session-snapshot-isolation"),
    "strong-snapshot-isolation": ("strong-session-snapshot-isolation", "strong-read-committed"),
    "strong-session-snapshot-isolation": ("snapshot-isolation", "strong-session-read-committed"),
    "strong-read-committed": ("strong-session-read-committed", "strong-read-uncommitted"),
    "strong-session-read-committed": ("read-committed", "strong-session-read-uncommitted"),
    "strong-read-uncommitted": ("strong-session-read-uncommitted",),
    "strong-session-read-uncommitted": ("read-uncommitted",),
    "serializable": (
        "repeatable-read",
        "snapshot-isolation",
        "view-serializable",
        "update-serializable",
    ),
    "update-serializable": ("forward-consistent-view",),
    "forward-consistent-view": ("consistent-view",),
    "consistent-view": ("cursor-stability", "monotonic-view"),
    "snapshot-isolation": (
        "forward-consistent-view",
        "monotonic-atomic-view",
        "monotonic-snapshot-read",
        "parallel-snapshot-isolation",
        "prefix",
    ),
    "parallel-snapshot-isolation": ("causal-cerone", "update-atomic"),
    "prefix": ("causal-cerone",),
    "causal-cerone": ("read-atomic",),
    "update-atomic": ("read-atomic",),
    "read-atomic": ("monotonic-atomic-view",),
    "monotonic-atomic-view": ("read-committed",),
    "repeatable-read": ("cursor-stability", "monotonic-atomic-view"),
    "cursor-stability": ("read-committed",),
    "monotonic-view": ("read-committed",),
    "monotonic-snapshot-read": ("read-committed",),
    "read-committed": ("read-uncommitted",),
    # Single-object models (Bailis): none proscribes an anomaly we detect, but a found anomaly
    # that rules out strict-serializable must not be read as ruling these out.
    "linearizable": ("sequential",),
    "sequential": ("causal",),
    "causal": ("writes-follow-reads", "PRAM"),
    "PRAM": ("monotonic-reads", "monotonic-writes", "read-your-writes"),
}

CYCLE_FAMILIES: tuple[str, ...] = (
    "G0",
    "G1c",
    "G1",
    "G-single-item",
    "G-single",
    "G-nonadjacent-item",
    "G-nonadjacent",
    "G2-item",
    "G2",
)
"""Anomalies that come in three strengths: over data dependencies alone, with each process's
order added (-process), and with real-time order added (-realtime)."""

_SCOPES = ("", "-process", "-realtime")

_CYCLE_IMPLIES: Mapping[str, tuple[str, ...]] = {
    "G0": ("G1c",),  # Adya: a ww cycle is a ww/wr cycle
    "G1c": ("G1",),  # Adya: G1 is G1a | G1b | G1c
    "G-single-item": ("G-single", "G-nonadjacent-item"),
    "G-single": ("G-nonadjacent",),  # one rw edge is trivially non-adjacent
    "G-nonadjacent-item": ("G-nonadjacent", "G2-item"),
    "G-nonadjacent": ("G2",),  # Adya: any cycle with an rw edge is G2
    "G2-item": ("G2",),
}
"""Implications between cycle families; they hold alike within each scope."""

_OTHER_IMPLIES: Mapping[str, tuple[str, ...]] = {
    "G1a": ("G1",),
    "G1b": ("G1",),
    "G-single": ("G-SIb",),  # Adya: one rw edge in the DSG is one in the SSG too
    "incompatible-order": ("G1a",),  # two reads from no one timeline: someone read dirty
    "dirty-update": ("G1a",),  # a write built on an aborted write: a dirty read, for writes
    "future-read": ("G1c",),  # reading one's own later write: a T -wr-> T cycle
    "lost-update": ("write-skew", "G2-item"),  # Bailis; a single key, so item-level
    "write-skew": ("G2",),  # Hermitage
}


def _anomaly_implications() -> dict[str, tuple[str, ...]]:
    """Spell out the cycle families in every scope, so the table cannot miss a variant.

    A -process cycle uses process edges on top of data edges, and processes are single threaded,
    so each scope implies the next (X -> X-process -> X-realtime), and the implications between
    families hold within each scope.
    """
    edges: dict[str, list[str]] = {}
    for family in CYCLE_FAMILIES:
        for scope, stronger in zip(_SCOPES, (*_SCOPES[1:], None), strict=True):
            targets = edges.setdefault(family + scope, [])
            targets.extend(t + scope for t in _CYCLE_IMPLIES.get(family, ()))
            if stronger is not None:
                targets.append(family + stronger)
    for anomaly, targets in _OTHER_IMPLIES.items():
        edges.setdefault(anomaly, []).extend(targets)
    return {a: tuple(ts) for a, ts in edges.items()}


ANOMALY_IMPLIES: Mapping[str, tuple[str, ...]] = _anomaly_implications()

PROSCRIBES: Mapping[str, tuple[str, ...]] = {
    # Only what each model adds over the weaker models it implies (plus, for the Adya levels,
    # the G1 their definitions repeat); `prohibited` closes over the rest.
    "read-uncommitted": (
        "G0",
        "duplicate-elements",  # no Adya history has these; a total version order,
        "cyclic-versions",  # a list with no repeats, is assumed by every level
        "PL-1-cycle-exists",
    ),
    "read-committed": ("G1", "PL-2-cycle-exists"),
    "cursor-stability": ("G1", "G-cursor", "lost-update"),  # Adya; Bailis
    "monotonic-view": ("G1", "G-monotonic"),
    "monotonic-snapshot-read": ("G1", "G-MSR"),
    "consistent-view": ("G1", "G-single"),
    "forward-consistent-view": ("G1", "G-SIb"),
    "update-serializable": ("G1", "G-update"),
    "repeatable-read": ("G1", "G2-item", "lost-update", "PL-2.99-cycle-exists"),
    # Cerone's atomic-visibility models; their lists are known to be incomplete.
    "read-atomic": ("internal", "G1a", "future-read"),  # INT, and EXT for future reads
    "causal-cerone": ("internal", "G1a"),
    "prefix": ("internal", "G1a"),
    "parallel-snapshot-isolation": ("internal", "G1a"),
    "update-atomic": ("lost-update",),
    # Generalized SI forbids every history whose rw edges are all non-adjacent (Cerone-SI,
    # Daudjee-SI), not only G-single.
    "snapshot-isolation": ("internal", "G1", "G-SI", "G-nonadjacent", "PL-SI-cycle-exists"),
    "serializable": ("internal", "G1", "G2", "predicate-read-miss", "PL-3-cycle-exists"),
    "strict-serializable": ("G1", "G1c-realtime", "G2-realtime", "PL-SS-cycle-exists"),
    # Session and real-time strengthenings: the same cycles, with process or real-time edges.
    "strong-session-read-uncommitted": ("G0-process", "strong-session-PL-1-cycle-exists"),
    "strong-session-read-committed": ("G1c-process", "strong-session-PL-2-cycle-exists"),
    "strong-read-uncommitted": ("G0-realtime", "strong-PL-1-cycle-exists"),
    "strong-read-committed": ("G1c-realtime", "strong-PL-2-cycle-exists"),
    "strong-session-snapshot-isolation": (
        "internal",
        "G1-process",
        "G-nonadjacent-process",  # you must see your own earlier writes
        "strong-session-snapshot-isolation-cycle-exists",
    ),
    "strong-snapshot-isolation": (
        "internal",
        "G1-realtime",
        "G-nonadjacent-realtime",  # you must see every completed write
        "strong-snapshot-isolation-cycle-exists",
    ),
    "strong-session-serializable": (
        "G1-process",  # Daudjee
        "G2-process",
        "strong-session-serializable-cycle-exists",
    ),
}


def _known_models() -> frozenset[str]:
    """Every friendly model name appearing anywhere in the tables."""
    names = set(MODELS) | set(ALIASES.values()) | set(MODEL_IMPLIES) | set(PROSCRIBES)
    for implied_models in MODEL_IMPLIES.values():
        names.update(implied_models)
    return frozenset(names)


_KNOWN_MODELS = _known_models()


def _reverse(graph: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    """Flip every edge, so the same closure can walk a graph either way."""
    reverse: dict[str, list[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            reverse.setdefault(target, []).append(source)
    return {k: tuple(v) for k, v in reverse.items()}


_MODELS_IMPLYING = _reverse(MODEL_IMPLIES)
_ANOMALIES_IMPLYING = _reverse(ANOMALY_IMPLIES)
_PROSCRIBED_BY = _reverse(PROSCRIBES)


def _closure(start: Iterable[str], step: Callable[[str], Iterable[str]]) -> frozenset[str]:
    """Everything reachable from `start` (inclusive) by repeated `step`; the graphs are DAGs
    of a few dozen nodes, so a plain worklist is all it takes."""
    seen = set(start)
    todo = list(seen)
    while todo:
        for nxt in step(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return frozenset(seen)


def check_model(name: str) -> str:
    """Return the friendly name of model `name`, which may be friendly or an alias.

    Raises ValueError for unknown names, so a typo in --model fails before a run, not after.
    """
    friendly = ALIASES.get(name, name)
    if friendly not in _KNOWN_MODELS:
        raise ValueError(f"unknown model '{name}': choose from {', '.join(MODELS)}")
    return friendly


def implied_models(models: Iterable[str]) -> frozenset[str]:
    """The given models and every model they imply (by friendly name)."""
    return _closure((check_model(m) for m in models), lambda m: MODEL_IMPLIES.get(m, ()))


def prohibited(models: Iterable[str]) -> frozenset[str]:
    """Every anomaly that cannot occur in a history satisfying all of `models`.

    A model forbids what it and every weaker model it implies forbid directly; and forbidding
    an anomaly forbids every anomaly that implies it (a history with G1a has G1). Raises
    ValueError for an unknown model name.
    """
    direct = {a for m in implied_models(models) for a in PROSCRIBES.get(m, ())}
    return _closure(direct, lambda a: _ANOMALIES_IMPLYING.get(a, ()))


def implied(anomalies: Iterable[str]) -> frozenset[str]:
    """The given anomalies and every anomaly they imply; unknown names imply only themselves."""
    return _closure(anomalies, lambda a: ANOMALY_IMPLIES.get(a, ()))


def boundary(anomalies: Iterable[str]) -> tuple[list[str], list[str]]:
    """The models `anomalies` rule out, as Elle's (:not, :also-not), each sorted.

    A model is impossible if it directly proscribes an anomaly the found ones imply, or if it
    implies an impossible model. `not` is the weakest impossible models (implying no other
    impossible model), which is the useful headline: a G2-item rules out repeatable-read, and
    so, needless to say, serializable, which goes in `also_not`.
    """
    direct = {m for a in implied(anomalies) for m in _PROSCRIBED_BY.get(a, ())}
    impossible = _closure(direct, lambda m: _MODELS_IMPLYING.get(m, ()))
    weakest = {
        m
        for m in impossible
        if not (_closure([m], lambda x: MODEL_IMPLIES.get(x, ())) - {m}) & impossible
    }
    return sorted(weakest), sorted(impossible - weakest)
