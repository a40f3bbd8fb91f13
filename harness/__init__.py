"""A Jepsen-style fault-injection harness for replicated Postgres."""
