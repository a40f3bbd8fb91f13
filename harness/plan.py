"""The test plan: what one run is, built once and read by the rest of the harness.

`harness run` builds it from the command line; `harness check` rebuilds the same plan from the
run's config.json (runs stored before the plan was recorded included: their configuration names
the same things), or from `--workload` for a bare history. It joins what the cluster kind
declares (its options, contract, poll records and cluster-state rules, processes and files) and
what each workload declares (its checkers, which of its operations write, what its checkers need
to know of the run), so that no part of the harness reads a string key to learn them.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from checkers.catalog import ALWAYS, Checker
from checkers.cluster_state import Rule
from checkers.moments import Moment
from clusters.kinds.base import ClusterKind
from clusters.registry import cluster_kind
from core.contract import Contract
from core.errors import BadInput
from core.polls import Record, known_records
from workloads import WORKLOADS
from workloads.base import Workload


@dataclass(frozen=True)
class WorkloadPlan:
    """A workload of the run, and what its checkers need to know of it (accounts, total, the
    consistency model its histories are held to)."""

    workload: type[Workload]
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.workload.name


@dataclass(frozen=True)
class TestPlan:
    __test__: ClassVar[bool] = False  # not a pytest test class, whatever its name

    workloads: tuple[WorkloadPlan, ...]
    contract: Contract = Contract.DURABLE
    kind: type[ClusterKind] | None = None  # None: a bare history, no cluster known
    options: Mapping[str, Any] = field(default_factory=dict)  # the kind's, checked
    max_recovery: float | None = None

    @classmethod
    def of_run(
        cls,
        kind: type[ClusterKind],
        options: Mapping[str, Any],
        workloads: Sequence[Workload],
        max_recovery: float | None = None,
    ) -> TestPlan:
        """The plan of a run about to start (its workloads made from the command line)."""
        checked = kind.checked_options(options)
        planned = tuple(WorkloadPlan(type(w), w.checker_params()) for w in workloads)
        return cls(planned, kind.contract_of(checked), kind, checked, max_recovery)

    @classmethod
    def of_config(
        cls, config: Mapping[str, Any], workloads: Sequence[str] | None = None
    ) -> TestPlan:
        """The plan of a stored run, from its config.json as it is (`workloads` names those to
        check, when not the run's own)."""
        names = list(workloads or config.get("workloads") or [])
        params = config.get("workload_params") or {}
        planned = tuple(WorkloadPlan(workload_class(n), params.get(n) or {}) for n in names)
        kind = cluster_kind(config["cluster"]) if config.get("cluster") else None
        if kind is None:  # a configuration that names no cluster may still name its contract
            mode = (config.get("cluster_options") or {}).get("mode")
            contract = Contract.parse(mode) if mode else Contract.DURABLE
            return cls(planned, contract, max_recovery=config.get("max_recovery"))
        options = kind.recorded_options(config.get("cluster_options") or {})
        return cls(planned, kind.contract_of(options), kind, options, config.get("max_recovery"))

    @classmethod
    def of_history(
        cls, workloads: Sequence[str], params: Mapping[str, Mapping[str, Any]]
    ) -> TestPlan:
        """The plan of a bare history: the named workloads with these checker parameters."""
        return cls(tuple(WorkloadPlan(workload_class(n), params.get(n) or {}) for n in workloads))

    def holding(
        self, contract: Contract | None = None, max_recovery: float | None = None
    ) -> TestPlan:
        """The same plan held to another contract or recovery bound (`harness check` told so)."""
        return TestPlan(
            self.workloads,
            contract or self.contract,
            self.kind,
            self.options,
            self.max_recovery if max_recovery is None else max_recovery,
        )

    @property
    def records(self) -> tuple[type[Record], ...]:
        return self.kind.poll_records if self.kind else known_records()

    @property
    def rules(self) -> tuple[type[Rule], ...]:
        return self.kind.state_rules if self.kind else ()

    @property
    def moments(self) -> tuple[type[Moment], ...]:
        return self.kind.moments_of(self.options) if self.kind else ()

    def writes(self, workload: str | None, f: str, value: Any) -> bool:
        """Whether the operation writes, as its workload declares; for an operation that names
        no workload, whether one of the plan's declares it a write."""
        return any(
            w.workload.writes(f, value) for w in self.workloads if workload in (None, w.name)
        )

    def checkers(self) -> dict[str, tuple[Checker, ...]]:
        """Each workload's checkers, by workload name."""
        return {w.name: w.workload.checkers for w in self.workloads}

    def params(self, model: str | None = None, **evidence: Any) -> dict[str, dict[str, Any]]:
        """Each checker's parameters: what it takes (by its judgment's signature) of its
        workload's parameters, the contract, the recovery bound, the cluster's records, rules
        and moments, the logs of its own daemons, and the `evidence` files of a run (polls,
        digests, the nodes' folder); `model` overrides the
        run's."""
        common: dict[str, Any] = {
            "contract": self.contract,
            "max_recovery": self.max_recovery,
            "rules": self.rules,
            "records": self.records,
            "moments": self.moments,
            "own_logs": self.kind.own_logs_in_run() if self.kind else (),
            **evidence,
        }
        params: dict[str, dict[str, Any]] = {}
        for w in self.workloads:
            given = {**common, **w.params, **({"model": model} if model else {})}
            for checker in w.workload.checkers:
                params[checker.name] = _taken(checker, given)
        for checker in ALWAYS:
            params[checker.name] = _taken(checker, common)
        return params

    def to_json(self) -> dict[str, Any]:
        """What config.json and results.json record of the plan."""
        kind = self.kind
        return {
            "kind": kind.name if kind else None,
            "options": dict(self.options),
            "contract": self.contract.value,
            "realtime_order": kind.realtime_order_of(self.options) if kind else None,
            "poll_records": [r.__struct_config__.tag for r in self.records] if kind else [],
            "state_rules": [r.name for r in self.rules],
            "moments": [m.name for m in self.moments],
            "processes": {p.name: p.pattern for p in kind.runs} if kind else {},
            "collected": list(kind.collected) if kind else [],
            "own_logs": list(kind.own_logs) if kind else [],
            "workloads": {
                w.name: {
                    "checkers": [c.name for c in w.workload.checkers],
                    "params": dict(w.params),
                }
                for w in self.workloads
            },
        }


def _taken(checker: Checker, given: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of `given` that the checker's judgment takes, those not None."""
    taken = inspect.signature(checker.judge).parameters
    return {k: v for k, v in given.items() if k in taken and v is not None}


def workload_class(name: str) -> type[Workload]:
    if name not in WORKLOADS:
        raise BadInput(f"unknown workload {name!r}: choose from {', '.join(sorted(WORKLOADS))}")
    return WORKLOADS[name]
