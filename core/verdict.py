"""Verdicts and exit codes, as DESIGN.md defines them."""

from typing import Literal

Validity = bool | Literal["unknown"]

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 2
EXIT_BAD_INPUT = 254
EXIT_INTERRUPTED = 130  # Ctrl-C: the history is kept and can be checked
EXIT_INFRA = 255


def combine(validities: list[Validity]) -> Validity:
    """The verdict of several checkers: any anomaly wins over unknown, unknown over valid."""
    if any(v is False for v in validities):
        return False
    if any(v == "unknown" for v in validities):
        return "unknown"
    return True


def word(valid: Validity) -> str:
    """How a verdict is spelled in results.json, reports and the terminal."""
    return {True: "valid", False: "invalid"}.get(valid, "unknown")  # type: ignore[arg-type]


def exit_code(valid: Validity) -> int:
    """The process exit code for a verdict."""
    return {True: EXIT_VALID, False: EXIT_INVALID}.get(valid, EXIT_UNKNOWN)  # type: ignore[arg-type]
