"""The reference cluster's daemons: safekeepers and the proxy (a walproposer), after seeds 000,
001 and 003, and the compute agent that decides which compute is the primary.

This package runs inside the nodes. It never imports the harness, and the harness imports of it
only the names of its planted bugs (bugs.py): it sees these daemons as a client and an operator
would (Postgres, the status command). Only the standard library and, on computes, psycopg are
used, so the node image needs nothing else. Imports inside the package are relative, because in
a node it is copied to its own directory and run as `python3 -m walkeeper`.
"""
