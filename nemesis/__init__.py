"""Faults and their schedules, registered in one place: name → nemesis class."""

from harness.errors import BadInput
from nemesis.base import Nemesis, NoNemesis

NEMESES: dict[str, type[Nemesis]] = {n.name: n for n in (NoNemesis,)}


def nemesis_class(name: str) -> type[Nemesis]:
    if name not in NEMESES:
        raise BadInput(f"unknown nemesis {name!r}: choose from {', '.join(sorted(NEMESES))}")
    return NEMESES[name]
