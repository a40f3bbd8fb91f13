"""The Manatee peers' sitter (seed 004): the daemon that runs beside each Postgres peer and keeps
it in the role the cluster state in ZooKeeper gives it. A black box to the harness: it imports
nothing of the harness, and the harness imports nothing of it (import-linter holds both)."""
