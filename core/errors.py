"""The two kinds of failure the CLI turns into exit codes (DESIGN.md: 254 and 255)."""


class BadInput(Exception):
    """The user asked for something wrong: flags, names, a malformed history. Exit 254."""


class InfraError(Exception):
    """The harness or its infrastructure failed (Docker, Spark, a node). Exit 255."""
