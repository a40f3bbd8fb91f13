"""A patch for the patroni kind's tests: Patroni's version module, saying 4.1.6 where the pinned
wheel says 4.1.5, so that each member's REST API shows the patched module is the one running."""

__version__ = "4.1.6"
