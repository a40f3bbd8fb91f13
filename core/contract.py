"""The contract a cluster promises its clients (DESIGN.md, "What the checkers hold each mode to").

A cluster kind declares the contract its runs are held to; the append and set checkers take it.
Both contracts hold every acknowledged write durable; confirm/rollback adds that a write told it
was rolled back never becomes visible.
"""

from __future__ import annotations

from enum import StrEnum

from core.errors import BadInput


class Contract(StrEnum):
    DURABLE = "durable"  # a COMMIT that returned survives every fault
    CONFIRM_ROLLBACK = "confirm-rollback"  # also: a write rolled back never appears (seed 002)

    @classmethod
    def parse(cls, text: str, where: str = "--mode") -> Contract:
        """The contract a name stands for; runs stored before the contract had its own name
        call `durable` "safekeeper", after the kind that first promised it."""
        name = LEGACY.get(text, text)
        try:
            return cls(name)
        except ValueError:
            choices = ", ".join(c.value for c in cls)
            raise BadInput(f"{where} {text!r} is no contract: choose from {choices}") from None


LEGACY = {"safekeeper": Contract.DURABLE.value}
