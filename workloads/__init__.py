"""Workloads, registered in one place: name → class."""

from core.errors import BadInput
from workloads.append import Append
from workloads.bank import Bank
from workloads.base import Workload, WorkloadOptions
from workloads.sets import SetWorkload

WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (Bank, Append, SetWorkload)}


def build(names: list[str], options: WorkloadOptions) -> list[Workload]:
    """Instantiate workloads by name; an unknown name is the user's mistake."""
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise BadInput(
            f"unknown workload {unknown[0]!r}: choose from {', '.join(sorted(WORKLOADS))}"
        )
    return [WORKLOADS[n](options) for n in names]
