"""The reference cluster's daemons: safekeepers and the proxy (a walproposer), after seeds 000,
001 and 003.

This package runs inside the nodes. It never imports the harness, and the harness never imports
it: the harness sees these daemons only as a client and an operator would (Postgres, the status
command). Only the standard library and, in the proxy, psycopg's libpq wrapper are used, so the
node image needs nothing else. Imports inside the package are relative, because in a node it is
copied to its own directory and run as `python3 -m walkeeper`.
"""
