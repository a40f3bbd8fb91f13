"""The bottom layer of the harness: what every other package may import and that imports none of
them. The history's events and operations, the contract a cluster promises, the typed records of
its polls, the store's layout, the errors and the exit codes."""
